"""What a new run may replace in its directory (seq2seq/train/run_outputs.py) and who may remove a
run directory (seq2seq/train/lock.py, seq2seq/cli/train.py): overwrite=true removes a run's own files
and nothing else, and a process that did not get a directory's lock removes nothing from it."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.artifacts.run_dir import RUN_MARKER
from seq2seq.cli.train import train
from seq2seq.config import UserError
from seq2seq.train.lock import run_directory_lock
from seq2seq.train.run_outputs import check_new_run_directory, is_run_directory

SMALL_RUN = [*TINY_TRAIN, "data.task_train_size=200", "max_steps=2", "valid_every=2", "save_every=2"]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    cache = tmp_path_factory.getbasetemp() / "seq2seq-cache"
    train(compose_config("train", [*SMALL_RUN, f"data.cache_dir={cache}"]), run_dir)
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    (copy / RUN_MARKER).unlink()  # recognised by its checkpoints, as a run made before the marker was
    return copy


def files_under(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_overwrite_refuses_a_folder_that_is_not_a_run_and_removes_nothing(tmp_path):
    # The refusal said "holds an earlier run (model/)" and the advised overwrite=true deleted all three.
    folder = tmp_path / "mine"
    for name, text in {
        "model/my_model.py": "class Mine: ...\n",
        "tb/notes.txt": "notes\n",
        "tokenizer.json": "{}",
    }.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    before = files_under(folder)
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", "overwrite=true"])
    with pytest.raises(UserError) as info:
        train(cfg, folder)
    assert str(info.value) == (
        f"{folder}: holds model/my_model.py, which no seq2seq run wrote; a run there would replace or mix with it: "
        "move it away or choose another directory"
    )
    assert files_under(folder) == before
    assert not is_run_directory(folder)


def test_a_new_run_without_overwrite_refuses_a_users_tokenizer_it_would_write_over(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"mine": true}')
    with pytest.raises(UserError, match=r"holds tokenizer\.json, which no seq2seq run wrote"):
        check_new_run_directory(folder, overwrite=False)


def test_overwrite_of_a_run_with_a_users_file_in_it_removes_nothing(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    (run_dir / "model" / "notes.txt").write_text("which checkpoint this was\n")
    before = files_under(run_dir)
    with pytest.raises(UserError) as info:
        check_new_run_directory(run_dir, overwrite=True)
    assert str(info.value).startswith(f"{run_dir}: holds model/notes.txt, which no seq2seq run wrote")
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", "overwrite=true"])
    with pytest.raises(UserError, match="model/notes.txt"):
        train(cfg, run_dir)
    assert files_under(run_dir) == before


def test_overwrite_removes_only_the_files_a_run_writes(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    (run_dir / "notes.txt").write_text("mine\n")  # beside the run's names: never touched
    old_events = sorted(p.name for p in (run_dir / "tb").iterdir())
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", "overwrite=true", "seed=7"])
    train(cfg, run_dir)
    assert (run_dir / "notes.txt").read_text() == "mine\n"
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["config"]["seed"] == 7
    assert not set(old_events) & {p.name for p in (run_dir / "tb").iterdir()}
    assert (run_dir / RUN_MARKER).is_file()


def test_a_run_directory_is_recognised_by_its_files_not_its_names(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    assert is_run_directory(run_dir)
    (run_dir / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match=r"holds checkpoints/best\.pt, which no seq2seq run wrote"):
        check_new_run_directory(run_dir, overwrite=True)


def test_overwrite_is_refused_while_the_run_is_training_naming_its_process(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    before = files_under(run_dir)
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", "overwrite=true"])
    with run_directory_lock(run_dir):  # the first run, still training
        with pytest.raises(UserError) as info:
            train(cfg, run_dir)
    assert str(info.value) == (
        f"{run_dir}: another seq2seq-train (process {os.getpid()}) is using this run directory; "
        "wait for it to end or choose another directory"
    )
    assert {k: v for k, v in files_under(run_dir).items() if k != ".lock"} == {
        k: v for k, v in before.items() if k != ".lock"
    }


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "SEQ2SEQ_CACHE": str(cwd / "cache")}
    return subprocess.Popen(
        [str(BIN / "seq2seq-train"), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.slow
def test_a_start_that_loses_the_lock_removes_nothing_and_overwrite_waits_for_the_winner(tmp_path):
    # The loser removed the winner's .hydra/, train.log and .lock; overwrite=true then got in while the
    # winner trained and deleted its checkpoints.
    run_dir = tmp_path / "run"
    first = _start([*SMALL_RUN, "max_steps=100000", "patience=null", f"hydra.run.dir={run_dir}"], tmp_path)
    deadline = time.monotonic() + 60
    while not (run_dir / ".hydra").is_dir() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        # Whoever locks it first owns it: by the time Hydra wrote .hydra/, the first run holds it.
        with pytest.raises(UserError, match=rf"another seq2seq-train \(process {first.pid}\)"):
            with run_directory_lock(run_dir):
                pass
        while not (run_dir / "checkpoints" / "last.pt").is_file() and first.poll() is None:
            time.sleep(0.1)
        third = subprocess.run(
            [str(BIN / "seq2seq-train"), *SMALL_RUN, "overwrite=true", f"hydra.run.dir={run_dir}"],
            cwd=tmp_path, env={**os.environ, "SEQ2SEQ_CACHE": str(tmp_path / "cache")},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert third.returncode == 2
        assert third.stderr.strip().splitlines() == [
            f"error: {run_dir}: another seq2seq-train (process {first.pid}) is using this run directory; "
            "wait for it to end or choose another directory"
        ]
        assert (run_dir / "checkpoints" / "last.pt").is_file() and (run_dir / "train.log").is_file()
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=120)
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "checkpoints" / "last.pt").is_file()


def test_a_runs_exports_never_replace_a_directory_holding_a_users_file(finished_run, tmp_path, caplog):
    # The export at a (resumed) run's end replaced model/ whole, and with it the user's notes there.
    from seq2seq.train.command import _write_inference_exports

    run_dir = copy_of(finished_run, tmp_path)
    (run_dir / "model" / "notes.txt").write_text("which checkpoint this was\n")
    before = files_under(run_dir / "model")
    with caplog.at_level("WARNING", logger="seq2seq.train"):
        _write_inference_exports(run_dir)
    assert files_under(run_dir / "model") == before
    assert "model/ not written: it holds model/notes.txt, which no run wrote" in caplog.text


def test_the_command_line_makes_and_locks_a_new_run_directory_before_hydra_writes(tmp_path):
    # Both runs passed this check while the directory did not exist; Hydra then wrote into it for both.
    from seq2seq.cli.train import check_run_directory

    run_dir = tmp_path / "new" / "run"
    check_run_directory([f"hydra.run.dir={run_dir}"])
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]
    assert (run_dir / ".lock").read_text() == f"{os.getpid()}\n"
    fd = os.open(run_dir / ".lock", os.O_RDWR)  # what the second run, started at the same moment, does
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_the_command_line_refuses_a_users_folder_before_writing_anything(tmp_path):
    from seq2seq.cli.train import check_run_directory

    folder = tmp_path / "mine"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "my_model.py").write_text("class Mine: ...\n")
    for overwrite in ([], ["overwrite=true"]):
        with pytest.raises(UserError, match=r"holds model/my_model\.py, which no seq2seq run wrote"):
            check_run_directory([f"hydra.run.dir={folder}", *overwrite])
    assert files_under(folder) == {"model/my_model.py": b"class Mine: ...\n"}
    assert not (folder / ".lock").exists()


def test_a_run_directory_the_command_checked_and_claimed_is_not_checked_again(tmp_path, monkeypatch):
    """seq2seq-train checks its run directory and claims it before Hydra writes there; train() does
    not check it again. Called from code, train() checks the directory itself."""
    import seq2seq.train.command as run
    import seq2seq.train.plan as plan
    from seq2seq.cli.train import check_run_directory

    checks: list[str] = []
    monkeypatch.setattr(plan, "check_new_run_directory", lambda *args: checks.append("new"))
    monkeypatch.setattr(run, "check_writable", lambda *args: checks.append("writable"))
    claimed = tmp_path / "claimed"
    check_run_directory([f"hydra.run.dir={claimed}"])
    train(compose_config("train", SMALL_RUN), claimed)
    assert checks == [] and (claimed / "checkpoints" / "last.pt").is_file()
    (tmp_path / "from_code").mkdir()
    train(compose_config("train", SMALL_RUN), tmp_path / "from_code")
    assert checks == ["new", "writable"]


def test_the_lock_a_killed_seq2seq_average_left_in_checkpoints_is_a_runs_file(tmp_path):
    # seq2seq-average's default output is checkpoints/averaged.pt; its writer's lock lies beside it.
    from seq2seq.artifacts.run_dir import MARKER_TEXT
    from seq2seq.train.run_outputs import files_not_a_runs

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / RUN_MARKER).write_text(MARKER_TEXT)
    (tmp_path / "checkpoints" / ".averaged.pt.lock").write_text("1234 seq2seq-average\n")
    assert files_not_a_runs(tmp_path, is_run=True) == []
    (tmp_path / "checkpoints" / ".notes.lock").write_text("mine")
    assert files_not_a_runs(tmp_path, is_run=True) == ["checkpoints/.notes.lock"]
