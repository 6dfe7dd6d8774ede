"""The one rule for every command that writes what the user names: a file (`seq2seq-average output=`,
`seq2seq-translate output=`) is replaced only when this command wrote it and nobody changed it since,
or when the user asks for exactly that file with `replace_output=true`; a folder (`seq2seq-distill
output=`, `claim_folder`) is written only when this command made it (its marker) or it is new or empty;
an output that must be new (`seq2seq-export output=`, `new_output`) is refused when anything is there.

Anything else is refused with one line naming the file, before any work is done: a user's text file,
a run's tokenizer, log or exports, another run's CTranslate2 model, a folder of the user's. Files a
writer owns by where they are (a run's exports, `replaced_folder`; a distillation's files,
`write_new_text`) need no ledger; the server writes only into a directory it made.
tests/test_writers.py lists every module that writes files and the rule each follows.

What "this command wrote it" means is kept in a ledger beside the machine's measurement cache
(made_files.json): a file's device, inode, size and modification time when the command finished it.
A file whose identity still matches is the command's own output, unchanged; a copy, an edit or a file
of the same name made by anything else does not match. A writer may also recognise its own kind by
content (`own_kind`: an averaged checkpoint carries `averaged_from`), so that a cleared cache or
another machine does not turn its earlier output into a refusal.

Two more parts of the rule (`writing_file` holds all three; `output_lock` is the first alone, for a
writer with its own crash-safe save):
- One writer per output: a lock on `.NAME.lock` beside it (file_lock.py) from the check to the end;
  a second command for the same file, whichever command, is refused in one line naming it. Refused,
  not made to wait: the waiting one would then replace the first's result, which is what was lost.
- A new file renamed over the old, never the old one rewritten: a hard link the user made to the
  earlier output keeps its content, and a command that fails (or is interrupted) leaves the old file
  as it was. The new file is written beside the output as `.NAME.XXXXXX.tmp`; one a killed process
  left is removed by the next writer of that output, when the ledger says this command made it.
No torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import filecmp
import glob
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from seq2seq.artifacts import file_lock
from seq2seq.artifacts.run_dir import RUN_MARKER, STAGING_NAME, TEMPORARY_SUFFIX
from seq2seq.config import UserError
from seq2seq.measurement_cache import cache_file
from seq2seq.stop_signals import stop_signals_raise

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


@contextlib.contextmanager
def writing_file(
    path: Path, key: str, command: str, replace: bool, own_kind: Callable[[Path], bool] | None = None
) -> Iterator[Path]:
    """The whole rule for a command that writes the one file `path` (named by `key`): holds its lock,
    checks it may be replaced (check_replaceable), and yields the new file to write instead. When the
    block ends, that file is renamed over `path` and recorded as this command's; when it raises (Ctrl-C
    and SIGTERM included), it goes and `path` is as it was. A symlink's target is the file replaced. A
    device or pipe is checked and yielded as it is: written to, never replaced."""
    if _is_stream(path):
        check_replaceable(path, key, command, replace)
        yield path
        return
    target = Path(os.path.realpath(path))
    with output_lock(path, key, command), stop_signals_raise():
        check_replaceable(path, key, command, replace, own_kind)
        _remove_leftovers(target, command)
        try:
            temporary = _new_file_beside(target)
        except OSError as err:
            raise UserError(f"{key}={path}: cannot write there ({err.strerror or err})") from err
        try:
            record(temporary, command, complete=False)  # a killed process's: the next writer removes it
            yield temporary
            _finish(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            forget(temporary)
            raise
        record(target, command)
        forget(temporary)


@contextlib.contextmanager
def output_lock(path: Path, key: str, command: str, make_parent: bool = False, folder: bool = False) -> Iterator[None]:
    """Holds the lock of `path`'s writers (`.NAME.lock` beside it, removed as it is let go) for the
    block; while another process holds it, raises UserError naming `key`, the file and that process.
    A device or pipe is not locked. `make_parent`: the directories above `path` are made first;
    `folder`: `path` is a folder the command writes (the refusal says so)."""
    if _is_stream(path):
        yield
        return
    lock = lock_file(Path(os.path.realpath(path)))
    try:
        if make_parent:
            lock.parent.mkdir(parents=True, exist_ok=True)
        fd = file_lock.acquire(lock, command)
    except file_lock.Busy as busy:
        pid, _, name = busy.holder.partition(" ")
        who = f"{name or 'a command'}, process {pid}" if busy.holder != "unknown" else "a command"
        what = "folder" if folder else "file"
        raise UserError(
            f"{key}={path}: another process ({who}) is writing this {what}; wait for it to end, "
            f"or give {key}= another {what}"
        ) from None
    except OSError as err:
        raise UserError(f"{key}={path}: cannot write there ({err.strerror or err})") from err
    try:
        yield
    finally:
        file_lock.release(fd, lock, remove=True)


def lock_file(target: Path) -> Path:
    """The lock file of `target`'s writers, beside it."""
    return target.with_name(f".{target.name}.lock")


def _is_stream(path: Path) -> bool:
    """A device or pipe (/dev/null, a FIFO, /dev/stdout onto a pipe): written to as it is, never
    replaced. Asked of the path as given: the kernel follows /dev/stdout to a pipe, realpath cannot."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def temporary_affixes(target: Path) -> tuple[str, str]:
    """(prefix, suffix) of the new file a writer of `target` fills beside it before it takes the name
    (this module's writers and checkpoint.atomic_save): a dot file, so that no tool lists it as an
    output or a checkpoint, and one `RunDir.remove_stale_temporaries` finds."""
    return f".{target.name}.", TEMPORARY_SUFFIX


def _new_file_beside(target: Path) -> Path:
    prefix, suffix = temporary_affixes(target)
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    os.close(fd)
    return Path(name)


def write_new_file(target: Path, write: Callable[[Path], None]) -> None:
    """`write(path)` fills a new file beside `target`, which then takes its name: the part of the rule
    for a writer whose files are its own by where they are (a directory it holds) and need no ledger.
    On an exception (an OSError passes through) the new file goes and `target` is as it was."""
    temporary = _new_file_beside(target)
    try:
        write(temporary)
        _finish(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_files_into(directory: Path, write: Callable[[Path], None]) -> None:
    """`write(folder)` fills a new folder inside `directory`; each file it wrote then takes its
    namesake's place in `directory` as write_new_file's do (renamed over it), except where the same bytes are there
    already (a resumed run saving the tokenizer it has): no file of `directory` is ever half-written,
    and a kill leaves the new folder, a dot folder remove_stale_temporaries knows."""
    directory.mkdir(parents=True, exist_ok=True)
    prefix, suffix = temporary_affixes(directory / STAGING_NAME)
    staging = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=directory))
    try:
        write(staging)
        for new in sorted(path for path in staging.rglob("*") if path.is_file()):
            target = directory / new.relative_to(staging)
            if target.is_file() and filecmp.cmp(new, target, shallow=False):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            _finish(new, target)  # renamed, not copied: the new file is beside it already
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- outputs that are folders ---------------------------------------------------------------------------
# seq2seq-export's output= must be new (`new_output`); a run's own exports are replaced whole
# (`replaced_folder`); seq2seq-distill's output= is a folder it made, resumed by it (`claim_folder`).


def check_new(path: Path, key: str) -> None:
    """An output that must be new: anything at `path` (a dangling link too) is refused in one line."""
    if path.exists() or path.is_symlink():
        raise UserError(f"{path}: already exists; give {key}= a new directory")


@contextlib.contextmanager
def new_output(path: Path, key: str, command: str, folder: bool = True) -> Iterator[Path]:
    """The rule for an output that must be new (seq2seq-export's output=): refused when anything is
    there, its writers' lock held throughout, the parents it needs made. Yields a new folder beside
    `path` (.NAME.XXXXXX.tmp) to write in: when the block ends, that folder takes `path`'s name (not
    `folder`: the file of `path`'s name written in it does); when it raises, the folder goes and so do
    the parents made for it, so nothing is left behind. Something that took `path` meanwhile is kept,
    and this one refused."""
    check_new(path, key)
    made = [parent for parent in Path(os.path.abspath(path)).parents if not os.path.isdir(parent)]
    try:
        with output_lock(path, key, command, make_parent=True, folder=folder):
            staging = _new_folder_beside(path)
            try:
                yield staging
                if path.exists() or path.is_symlink():  # appeared while this one was written
                    raise UserError(f"{path}: already exists; give {key}= a new {'directory' if folder else 'file'}")
                os.rename(staging if folder else staging / path.name, path)
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # what is left of it
    except BaseException:
        for parent in made:  # the deepest first, each only while empty
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        raise


@contextlib.contextmanager
def replaced_folder(path: Path) -> Iterator[Path]:
    """A folder that is its writer's own by where it is (a run's model/ under the run's lock), replaced
    whole: the block fills a new folder beside it, which then takes its name; the old one is moved
    aside (.NAME.XXXXXX.old) before and deleted after, so that `path` is always one whole folder. When
    the block raises, the new folder goes and `path` is as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = _new_folder_beside(path)
    try:
        yield staging
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.rename(path, old / path.name)
            os.rename(staging, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def remove_folder_leftovers(path: Path) -> int:
    """Deletes what killed writers of the folder `path` left beside it (new_output's and
    replaced_folder's .NAME.*.tmp and .NAME.*.old folders); returns their total size. Only while
    holding what owns `path` (a run's lock)."""
    removed = 0
    escaped = glob.escape(path.name)
    for leftover in [*path.parent.glob(f".{escaped}.*.tmp"), *path.parent.glob(f".{escaped}.*.old")]:
        if leftover.is_dir() and not leftover.is_symlink():
            removed += sum(f.stat().st_size for f in leftover.rglob("*") if f.is_file())
            shutil.rmtree(leftover, ignore_errors=True)
    return removed


def _new_folder_beside(path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as err:
        raise UserError(f"{path}: cannot create the output directory ({err.strerror or err})") from err


def claim_folder(path: Path, key: str, command: str, marker: str, text: str) -> bool:
    """Makes the folder `path` this command's, or finds it already is; True when it is (a rerun resumes
    it). Its `marker` file says so, by content (as `own_kind` does for a file: a cleared cache or another
    machine keeps it this command's). A folder that holds anything without the marker is someone
    else's: refused in one line, nothing written (an empty one is taken). A file there is refused too."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{key}={path}: is a file; give a new folder")
    if (path / marker).is_file():
        return True
    if path.is_dir() and any(path.iterdir()):
        raise UserError(f"{key}={path}: holds files {command} did not write; give a new folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / marker).write_text(text, encoding="utf-8")  # a part of it is a marker all the same
    except OSError as err:
        raise UserError(f"{key}={path}: cannot write there ({err.strerror or err})") from err
    return False


def write_new_text(target: Path, text: str) -> None:
    """`target` holding `text`, in UTF-8 with \\n line ends, replaced whole (write_new_file)."""
    write_new_file(target, lambda new: new.write_bytes(text.encode("utf-8")))


def fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); not possible on every platform."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_new_json(target: Path, value: Any) -> None:
    """`target` holding `value` as JSON, replaced whole (write_new_text) and the rename made durable: a
    state file holds the old value or the new one, never a part. A failed write (a full disk) leaves no
    part of a file, and the OSError goes on to the caller, which names the key."""
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"  # a value JSON cannot hold: nothing written
    write_new_text(target, text)
    fsync_directory(target.parent)


def _finish(temporary: Path, target: Path) -> None:
    """The new file as an ordinary one (mkstemp makes it 0600: the old file's mode, or the umask's),
    on the disk before its name is, then renamed over `target`."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
        os.umask(mask)
        mode = 0o666 & ~mask
    os.chmod(temporary, mode)
    fd = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)


def _remove_leftovers(target: Path, command: str) -> None:
    """The new files of `target` a killed `command` left beside it (the ledger knows them); only
    while holding its lock."""
    prefix, suffix = temporary_affixes(target)
    for leftover in target.parent.glob(f"{glob.escape(prefix)}*{glob.escape(suffix)}"):
        if made_by(leftover, command):
            leftover.unlink(missing_ok=True)
            forget(leftover)


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


def forget(path: Path) -> None:
    """Takes `path` out of the ledger (a new file renamed away, or removed)."""
    with contextlib.suppress(OSError), _locked():
        ledger = _read()
        if ledger.pop(_key(path), None) is not None:
            _write(ledger)


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
