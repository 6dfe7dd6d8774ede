"""One training run per run directory: two runs writing into one directory would mix their
checkpoints, config and log, and both would report success. The lock stops two at once; what may
stand in a directory a new run starts in is seq2seq/train/run_outputs.py's to say.

`seq2seq-train` claims the directory before Hydra writes its .hydra/ and train.log there, and keeps it
for the rest of the process: a second run started at the same moment is refused before it writes
anything, and a process that did not get the lock never removes anything (the directory is the
winner's)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from seq2seq.artifacts import file_lock
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import UserError

# Run directories this process claimed for its whole life (seq2seq-train, before Hydra starts):
# run_directory_lock in train() finds them held already.
_claimed: dict[Path, int] = {}


def _acquire(run_dir: Path) -> int:
    """An open descriptor holding the exclusive lock on <run_dir>/.lock, with this process's id in it.
    The kernel drops the lock when the process ends, however it ends (SIGKILL included), so a stale
    file never blocks a later run."""
    try:
        return file_lock.acquire(RunDir(run_dir).lock)
    except file_lock.Busy as busy:
        raise _busy(run_dir, busy.holder) from None


def _busy(run_dir: Path, holder: str) -> UserError:
    return UserError(
        f"{run_dir}: another seq2seq-train (process {holder.split()[0]}) is using this run directory; "
        "wait for it to end or choose another directory"
    )


def refuse_if_busy(run_dir: Path) -> None:
    """Raises the error run_directory_lock raises when another process holds `run_dir`, without
    creating a .lock there (a directory that is then refused for its contents is left as it was)."""
    if holds_run_directory(run_dir):
        return
    if (holder := file_lock.holder_of(RunDir(run_dir).lock)) is not None:
        raise _busy(run_dir, holder)


def claim_run_directory(run_dir: Path) -> None:
    """Locks `run_dir` (which exists) until this process ends; raises UserError when another holds it."""
    key = run_dir.resolve()
    if key not in _claimed:
        _claimed[key] = _acquire(run_dir)


def holds_run_directory(run_dir: Path) -> bool:
    """Whether this process claimed `run_dir` (claim_run_directory)."""
    return run_dir.resolve() in _claimed


@contextlib.contextmanager
def run_directory_lock(run_dir: Path) -> Iterator[None]:
    """Holds the lock on `run_dir` while the body runs (already held if this process claimed it)."""
    if holds_run_directory(run_dir):
        yield
        return
    fd = _acquire(run_dir)
    try:
        yield
    finally:
        os.close(fd)  # releases the lock
