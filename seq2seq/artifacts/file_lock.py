"""An exclusive lock on a lock file, held by one process at a time: flock(2), which the kernel drops
when the process ends however it ends (SIGKILL included), so a stale file never blocks a later writer.
The holder writes its process id (and what it is) into the file, for the refusal to name it.
A folder held by one command at a time (a run directory, a distillation's output or cache folder) is
locked by FOLDER_LOCK inside it (`held`: for a block, a second command refused in one line); a file's
writers lock one beside it (replacing.py).

A lock file may be removed by its holder as it lets go (`release(..., remove=True)`), so that no lock
file is left beside a user's output: a process that opened the file just before it was removed gets a
lock on a file nobody else will ever see, so `acquire` checks the path still names the file it locked,
and takes it again when not. No torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from seq2seq.config import UserError

FOLDER_LOCK = ".lock"


class Busy(Exception):
    """Another process holds the lock; `holder` is what it wrote ("1234 seq2seq-translate"), or
    "unknown" when it wrote nothing in time."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path}: held by {holder}")
        self.path, self.holder = path, holder


def acquire(path: Path, owner: str = "") -> int:
    """An open descriptor holding the exclusive lock on `path` (made if missing), with this process's
    id (and `owner`, what it is) written in it. Raises Busy at once when another process holds it (never waits);
    an OSError (no such directory, no permission) passes through."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise Busy(path, holder) from None
        except BaseException:
            os.close(fd)
            raise
        # A lock on a file that was unlinked while we opened it would guard nothing: take it again.
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {owner}".strip().encode() + b"\n", 0)
    return fd


@contextlib.contextmanager
def held(folder: Path, command: str, what: str) -> Iterator[None]:
    """`folder`'s FOLDER_LOCK for the block: a second `command` writing `what` there is refused in one
    line. The kernel drops the lock however the process ends, so a killed one never blocks the next."""
    try:
        fd = acquire(folder / FOLDER_LOCK, command)
    except Busy:
        raise UserError(f"{folder}: another {command} is writing {what} there; wait for it") from None
    try:
        yield
    finally:
        release(fd, folder / FOLDER_LOCK)


def holder_of(path: Path) -> str | None:
    """What the process holding `path` wrote in it, or None when none holds it (or there is no such
    file: none is made)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(fd)
    finally:
        os.close(fd)  # a lock taken here goes with it
    return None


def release(fd: int, path: Path, remove: bool = False) -> None:
    """Lets go of the lock `acquire` returned; with `remove`, the lock file goes first (while still
    held, so that no other process is between its lock and the removal)."""
    try:
        if remove:
            with contextlib.suppress(OSError):
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    os.unlink(path)
    finally:
        os.close(fd)


def _holder(fd: int) -> str:
    """What the holder wrote; it writes just after it locks, so wait a moment for it."""
    for _ in range(20):
        if holder := os.pread(fd, 200, 0).decode(errors="replace").strip():
            return holder
        time.sleep(0.01)
    return "unknown"
