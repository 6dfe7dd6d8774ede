"""What building the data cache leaves behind (seq2seq/data/cache_builds.py): nothing after SIGTERM,
and what a killed process left goes at the next start, never a build that is still under way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_pipeline import cache_entries, cfg  # noqa: F401  (the fixture)

import seq2seq.data.pipeline as pipeline
from seq2seq.data.pipeline import cache_key, prepare_data


@pytest.fixture
def default_sigterm():
    """SIGTERM as a process starts with it: the default action, which ends the process without cleanup."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_sigterm_while_tokenizing_removes_the_half_built_cache(cfg, monkeypatch, default_sigterm):  # noqa: F811
    # It left <cache>/<key>.tmpNNN/work/raw.arrow, as large as the corpus, forever.
    real_train = pipeline.Tokenizers.train

    def terminated_while_training(*args: object, **kwargs: object) -> object:
        assert any(Path(cfg.cache_dir).glob("*.tmp*/work/raw.arrow"))  # the corpus is on disk by now
        os.kill(os.getpid(), signal.SIGTERM)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(pipeline.Tokenizers, "train", terminated_while_training)
    with pytest.raises(SystemExit) as info:
        prepare_data(cfg)
    assert info.value.code == 128 + signal.SIGTERM  # as the shell reports a process that SIGTERM ended
    assert cache_entries(cfg) == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # given back after the build


def ended_process_id() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_builds_of_ended_processes_go_at_the_next_start_and_nothing_else(cfg):  # noqa: F811
    root = Path(cfg.cache_dir)
    key, host, dead = cache_key(cfg), socket.gethostname(), ended_process_id()
    kept = [
        f"{key}.tmp{os.getppid()}@{host}",  # a build under way (a process that runs)
        f"{key}.tmp{dead}@another-machine",  # on another machine, whose processes this one cannot see
        f"notes.tmp{dead}",  # not a name this tool gives
    ]
    abandoned = [f"{key}.tmp{dead}@{host}", f"{key}.damaged{dead}@{host}", f"{key}.tmp{dead}"]
    for name in kept + abandoned:
        (root / name / "work").mkdir(parents=True)
        (root / name / "work" / "raw.arrow").write_bytes(b"x" * 1000)
    prepare_data(cfg)
    assert cache_entries(cfg) == sorted([key, *kept])
