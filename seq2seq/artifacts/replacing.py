"""The one rule for every command that writes a file the user names (`seq2seq-average output=`,
`seq2seq-translate output=`): an existing file is replaced only when this command wrote it and nobody
changed it since, or when the user asks for exactly that file with `replace_output=true`.

Anything else is refused with one line naming the file, before any work is done: a user's text file,
a run's tokenizer, log or exports, another run's CTranslate2 model. `seq2seq-export` needs no ledger
(its output must be new) and the server writes only into a directory it made.

What "this command wrote it" means is kept in a ledger beside the machine's measurement cache
(made_files.json): a file's device, inode, size and modification time when the command finished it.
A file whose identity still matches is the command's own output, unchanged; a copy, an edit or a file
of the same name made by anything else does not match. A writer may also recognise its own kind by
content (`own_kind`: an averaged checkpoint carries `averaged_from`), so that a cleared cache or
another machine does not turn its earlier output into a refusal. No torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from seq2seq.artifacts.run_dir import RUN_MARKER
from seq2seq.config import UserError
from seq2seq.measurement_cache import cache_file

LEDGER = "made_files.json"
MAX_ENTRIES = 1000  # the oldest go first; a forgotten entry costs only a refusal naming replace_output=true


def check_replaceable(
    path: Path, key: str, command: str, replace: bool, own_kind: Callable[[Path], bool] | None = None
) -> None:
    """Refuses to write `path` (named by `key`, e.g. "output") when that would replace a file `command`
    did not write. Devices and pipes (/dev/null, a FIFO) are written to, never replaced: they pass."""
    try:
        info = os.stat(path)
    except OSError:  # nothing there to replace (or no way to it: the write itself says why)
        return
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{key}={path}: is a directory; give {key}= a file")
    if not stat.S_ISREG(info.st_mode) or replace:
        return
    if made_by(path, command) or (own_kind is not None and own_kind(path)):
        return
    run = enclosing_run(path)
    what = f"a file of the run {run}" if run is not None else f"a file {command} did not write"
    raise UserError(
        f"{key}={path}: already exists and is {what}; give {key}= a new file, "
        f"or add replace_output=true to replace exactly this file"
    )


def enclosing_run(path: Path) -> Path | None:
    """The run directory (the one holding a run's marker) that `path` lies in, if any."""
    for directory in Path(os.path.abspath(path)).parents:
        if (directory / RUN_MARKER).is_file():
            return directory
    return None


def made_by(path: Path, command: str) -> bool:
    """Whether `command` wrote `path` and it is unchanged since (or was left half-written by it)."""
    entry = _read().get(_key(path))
    if not isinstance(entry, dict) or entry.get("command") != command:
        return False
    try:
        now = _identity(path)
    except OSError:
        return False
    if entry.get("complete") is False:  # killed while writing: the same file, whatever its size now
        return (entry.get("dev"), entry.get("ino")) == (now["dev"], now["ino"])
    return all(entry.get(field) == value for field, value in now.items())


def record(path: Path, command: str, complete: bool = True) -> None:
    """Notes that `command` wrote `path` (`complete=False` as it starts: a killed write stays its own).
    A ledger that cannot be written costs only a later refusal, never the command."""
    with contextlib.suppress(OSError), _locked():
        ledger = _read()
        ledger.pop(_key(path), None)
        ledger[_key(path)] = {"command": command, "complete": complete, **_identity(path)}
        _write(dict(list(ledger.items())[-MAX_ENTRIES:]))


def _identity(path: Path) -> dict[str, int]:
    info = os.stat(path)
    return {"dev": info.st_dev, "ino": info.st_ino, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _key(path: Path) -> str:
    return os.path.realpath(path)


def _read() -> dict[str, Any]:
    try:
        ledger = json.loads(cache_file(LEDGER).read_text())
    except (OSError, ValueError):
        return {}
    return ledger if isinstance(ledger, dict) else {}


def _write(ledger: dict[str, Any]) -> None:
    path = cache_file(LEDGER)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(ledger, indent=1))
    os.replace(temporary, path)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Two commands finishing at once each keep their entry: the read-modify-write holds a lock."""
    lock = cache_file(LEDGER + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
