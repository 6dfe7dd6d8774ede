"""What building the tokenized-data cache (seq2seq/data/pipeline.py) leaves behind, and when it goes.

A build writes into <cache>/<key>.tmp<pid>@<host> and renames it to <cache>/<key> when complete; a
damaged cache is renamed to <key>.damaged<pid>@<host> before it is deleted. An error, Ctrl-C or
SIGTERM removes the build's own directory on the way out; what a process killed outright (SIGKILL, a
power cut) left is removed by the next start, once its process has ended.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

# A build's staging directory and a damaged cache on its way out: <key>.tmp<pid>@<host> and
# <key>.damaged<pid>@<host> (without @<host>: named by an earlier version, on this machine).
_ABANDONED = re.compile(r"[0-9a-f]{16}\.(?:tmp|damaged)(?P<pid>\d+)(?:@(?P<host>.+))?")


def owner() -> str:
    """Who is writing a directory of the cache: a cache directory may be shared between machines."""
    return f"{os.getpid()}@{socket.gethostname()}"


def remove_abandoned_builds(root: Path) -> int:
    """Removes what builds of processes that no longer run left in the cache (a SIGKILL, a power cut:
    nothing of theirs could clean up); returns the bytes freed. Only this tool's names, only this
    machine's processes, only those that have ended: a build under way is never touched."""
    freed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = _ABANDONED.fullmatch(entry.name)
        if match is None or match["host"] not in (None, socket.gethostname()) or _is_running(int(match["pid"])):
            continue
        if entry.is_dir() and not entry.is_symlink():
            freed += sum(f.stat().st_size for f in entry.rglob("*") if f.is_file() and not f.is_symlink())
            shutil.rmtree(entry, ignore_errors=True)
    return freed


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # ended; a number no process can have
        return False
    except PermissionError:  # another user's process
        return True
    return True
