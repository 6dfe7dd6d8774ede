"""One training process per run directory: two runs writing into one directory would mix their
checkpoints, config and log, and both would report success."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from seq2seq.config import UserError

LOCK_FILE = ".lock"


@contextlib.contextmanager
def run_directory_lock(run_dir: Path) -> Iterator[None]:
    """Holds an exclusive lock on <run_dir>/.lock while the body runs. The kernel drops it when the
    process ends, however it ends (SIGKILL included), so a stale file never blocks a later run."""
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise UserError(
                f"{run_dir}: another seq2seq-train (process {holder}) is using this run directory; "
                "wait for it to end or choose another directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_unlocked(run_dir: Path) -> None:
    """Raises the same error as run_directory_lock when another process holds the directory."""
    if (run_dir / LOCK_FILE).is_file():
        with run_directory_lock(run_dir):
            pass
