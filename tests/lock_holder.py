"""A process that holds the lock of an output's writers, as a command writing it would: flock(2) on
`.NAME.lock` beside the file, with "<pid> <command>" in it (seq2seq/artifacts/replacing.py's protocol,
taken here without the code under test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HOLD = """
import fcntl, os, sys
path = os.path.realpath(sys.argv[1])
lock = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".lock")
fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
os.write(fd, f"{os.getpid()} {sys.argv[2]}\\n".encode())
print("held", flush=True)
sys.stdin.read()
os.unlink(lock)
"""


def hold_lock_in_another_process(path: Path, command: str = "seq2seq-translate") -> subprocess.Popen[str]:
    """Started and holding the lock when it returns; `.communicate("")` lets go (and removes the file)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder
