"""One training run per run directory: two runs writing into one directory would mix their
checkpoints, config and log, and both would report success. The lock stops two at once; a new run
into a directory that an earlier run trained in is refused unless overwrite=true (resume= continues it)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from seq2seq.config import UserError

LOCK_FILE = ".lock"
# What a run leaves in its directory and a new run would replace or mix with its own (train.log and
# .hydra/ are kept: Hydra appends the new run's log and keeps each config).
RUN_OUTPUTS = (
    "checkpoints",
    "model",
    "ctranslate2",
    "tb",
    "tokenizer.json",
    "tokenizer.src.json",
    "tokenizer.tgt.json",
)


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


def previous_run(run_dir: Path) -> str | None:
    """The first sign that a run trained in `run_dir` (a checkpoint or an export of it), or None."""
    try:
        checkpoints = sorted((run_dir / "checkpoints").glob("*.pt")) if (run_dir / "checkpoints").is_dir() else []
        exports = [name for name in ("model", "ctranslate2") if (run_dir / name).is_dir()]
    except OSError:  # a name too long, a file on the path: the writability check says so in one line
        return None
    if checkpoints:
        return f"checkpoints/{checkpoints[0].name}"
    return f"{exports[0]}/" if exports else None


def refuse_previous_run(run_dir: Path) -> None:
    """A new run would replace the earlier run's best.pt, last.pt and exports and leave its step_N.pt
    beside them (fairseq and OpenNMT-py refuse too): say how to continue it or replace it."""
    if (found := previous_run(run_dir)) is not None:
        raise UserError(
            f"{run_dir}: holds an earlier run ({found}); continue it with resume={run_dir}, "
            "start afresh there with overwrite=true, or choose another directory"
        )


def clear_previous_run(run_dir: Path) -> list[str]:
    """overwrite=true: removes what an earlier run left (its checkpoints, exports, dashboards and
    tokenizer), so that nothing of it is mistaken for the new run's; returns what was removed."""
    removed = []
    for name in RUN_OUTPUTS:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(name)
    return removed
