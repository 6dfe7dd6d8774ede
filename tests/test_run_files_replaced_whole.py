"""A resumed run saves its tokenizer and data.clean's report again: each file is replaced whole or
left as it was, never rewritten in place (a kill during the write would leave a run whose
checkpoints no tokenizer can read)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config

from seq2seq.artifacts.run_dir import RunDir
from seq2seq.cli.train import train
from seq2seq.data.tokenizer import JOINT_FILE, Tokenizers

FIRST = [*TINY_TRAIN, "max_steps=2", "valid_every=2", "save_every=2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FIRST, trained once for the module: each test takes a copy (copying is cheap, training is not)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    with pytest.MonkeyPatch.context() as patch:  # module scope: conftest's per-test cache is not set yet
        patch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))
        train(compose_config("train", FIRST), run)
    return run


@pytest.fixture
def run(trained: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def resume(run: Path) -> None:
    option = f"resume={run}"
    train(compose_config("train", [*FIRST, option]), run, overrides=[option, "max_steps=4"])


def test_a_kill_while_the_resumed_run_saves_its_tokenizer_leaves_the_old_file_whole(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (run / JOINT_FILE).read_bytes()

    def killed_while_saving(self: Tokenizers, directory: Path) -> None:
        (directory / JOINT_FILE).write_text('{"version"')  # half a file, then the process goes
        raise KeyboardInterrupt

    monkeypatch.setattr(Tokenizers, "save", killed_while_saving)
    with pytest.raises(KeyboardInterrupt):
        resume(run)
    assert (run / JOINT_FILE).read_bytes() == before
    assert not list(run.glob(".staging.*"))  # the new folder went with the failed save


def test_a_resumed_run_leaves_its_unchanged_tokenizer_file_untouched(run: Path) -> None:
    past = 1_000_000_000_000_000_000  # 2001, in nanoseconds: any write of the file would change it
    os.utime(run / JOINT_FILE, ns=(past, past))
    inode = (run / JOINT_FILE).stat().st_ino
    resume(run)
    assert (run / JOINT_FILE).stat().st_mtime_ns == past  # the same bytes: not written at all
    assert (run / JOINT_FILE).stat().st_ino == inode


def test_a_staging_folder_a_killed_run_left_goes_at_the_next_start(run: Path) -> None:
    left = run / ".staging.abc123.tmp"
    left.mkdir()
    (left / JOINT_FILE).write_text("{")
    mine = run / ".staging-notes.txt"  # not a name the run writes: never removed
    mine.write_text("mine")
    assert RunDir(run).remove_stale_temporaries() == 1
    assert not left.exists() and mine.read_text() == "mine"
