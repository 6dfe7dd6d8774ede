"""What a new run may replace in its run directory (what a run writes there: seq2seq.artifacts.run_dir).

A directory is a run's when it holds what only this tool writes: the marker every run writes as it
takes the directory, a checkpoint in this tool's format, or an export that records its checkpoint.
Within the names a run writes (checkpoints/, model/, ctranslate2/, tb/, the tokenizer files) every
file must be one a run writes: overwrite=true removes exactly those, and a file of any other name
there (a user's model/my_model.py) stops the new run before anything is removed, named. Files
elsewhere in the directory (notes, .hydra/, train.log) are never touched.

A start that fails (a bad init_from=, unreadable data) takes back what it added to the directory and
nothing else: `BeforeStart` is the directory as it stood before the start wrote into it. Once the run
holds the directory, `clear_leftovers` removes what an earlier or interrupted run left there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from seq2seq.artifacts.checkpoint import is_checkpoint_file
from seq2seq.artifacts.path_kind import DECODING_FILE, WEIGHTS_CONFIG, WEIGHTS_FORMAT
from seq2seq.artifacts.run_dir import (
    CHECKPOINTS_DIR,
    CLEANING_REPORT,
    CTRANSLATE2_DIR,
    INFERENCE_DIR,
    MARKER_TEXT,
    RUN_DIRECTORIES,
    STARTUP_FILES,
    TOKENIZER_FILES,
    RunDir,
)
from seq2seq.config import UserError

log = logging.getLogger("seq2seq.train")  # command.py's: the run's log lines, wherever they are written
TOP_FILES = (*TOKENIZER_FILES, CLEANING_REPORT)  # what a run writes at the top of its directory


def is_run_directory(run_dir: Path) -> bool:
    """Whether `run_dir` holds what only a seq2seq run writes."""
    try:
        if RunDir(run_dir).marker.read_text(encoding="utf-8") == MARKER_TEXT:
            return True
    except (OSError, UnicodeDecodeError):
        pass
    return bool(earlier_run(run_dir)) or _has_own_export(run_dir)


def earlier_run(run_dir: Path) -> str | None:
    """The first sign that a run trained in `run_dir` (one of its checkpoints, or an export of one)."""
    checkpoints = RunDir(run_dir).checkpoints
    try:
        names = sorted(p.name for p in checkpoints.iterdir()) if checkpoints.is_dir() else []
    except OSError:  # a name too long, a file on the path: the writability check says so in one line
        return None
    for name in names:
        if name.endswith(".pt") and RUN_DIRECTORIES[CHECKPOINTS_DIR].fullmatch(name):
            if is_checkpoint_file(checkpoints / name):
                return f"{CHECKPOINTS_DIR}/{name}"
    exports = [name for name in (INFERENCE_DIR, CTRANSLATE2_DIR) if _has_own_export(run_dir, (name,))]
    return f"{exports[0]}/" if exports else None


def _has_own_export(run_dir: Path, names: tuple[str, ...] = (INFERENCE_DIR, CTRANSLATE2_DIR)) -> bool:
    """model/ with this tool's weights config, or ctranslate2/ with the record this tool writes."""
    for name in names:
        if name == INFERENCE_DIR:
            try:
                if f'"format": "{WEIGHTS_FORMAT}"' in (run_dir / name / WEIGHTS_CONFIG).read_text(encoding="utf-8"):
                    return True
            except (OSError, UnicodeDecodeError):
                continue
        elif (run_dir / name / DECODING_FILE).is_file():
            return True
    return False


def files_not_a_runs(run_dir: Path, is_run: bool, names: tuple[str, ...] = tuple(RUN_DIRECTORIES)) -> list[str]:
    """The files, relative to `run_dir`, under the names a run writes (`names` of RUN_DIRECTORIES, and
    the tokenizer files) that no run wrote: files of other names there, anything at all there when
    `run_dir` is not a run's (empty directories aside), and a checkpoint name holding something else
    than a checkpoint."""
    found = []
    for name in names:
        pattern = RUN_DIRECTORIES[name]
        directory = run_dir / name
        if directory.is_symlink() or directory.is_file():
            found.append(name)
            continue
        if not directory.is_dir():
            continue
        for path in sorted(directory.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                continue
            relative = path.relative_to(run_dir).as_posix()
            own = path.parent == directory and not path.is_symlink() and pattern.fullmatch(path.name)
            if own and name == CHECKPOINTS_DIR and path.suffix == ".pt":
                own = is_checkpoint_file(path)
            if not own or not is_run:
                found.append(relative)
    if not is_run:
        found += [name for name in TOP_FILES if (run_dir / name).exists() or (run_dir / name).is_symlink()]
    return found


def check_new_run_directory(run_dir: Path, overwrite: bool) -> None:
    """A new run into `run_dir` would write over what is there: refused when it is not a run's
    (naming a file) and, without overwrite=true, when it is an earlier run."""
    if not os.path.isdir(run_dir):  # nothing there yet, or a path the writability check refuses in one line
        return
    is_run = is_run_directory(run_dir)
    if foreign := files_not_a_runs(run_dir, is_run):
        raise UserError(
            f"{run_dir}: holds {foreign[0]}, which no seq2seq run wrote; a run there would replace or mix with it: "
            "move it away or choose another directory"
        )
    if not overwrite and (found := earlier_run(run_dir)) is not None:
        raise UserError(
            f"{run_dir}: holds an earlier run ({found}); continue it with resume={run_dir}, "
            "start afresh there with overwrite=true, or choose another directory"
        )


def clear_earlier_run(run_dir: Path) -> list[str]:
    """overwrite=true: removes the files an earlier run wrote (its checkpoints, exports, dashboards and
    tokenizer), so that nothing of it is mistaken for the new run's; returns the names removed from.
    Checks first (check_new_run_directory) and removes nothing when a file is not a run's."""
    check_new_run_directory(run_dir, overwrite=True)
    removed = []
    for name in RUN_DIRECTORIES:
        directory = run_dir / name
        if directory.is_dir() and any(directory.iterdir()):
            for path in directory.iterdir():  # all a run's: checked above
                path.unlink()
            removed.append(name)
        if directory.is_dir():
            shutil.rmtree(directory)  # empty now, or only empty directories
    for name in TOP_FILES:
        if (run_dir / name).is_file():
            (run_dir / name).unlink()
            removed.append(name)
    return removed


def holds_only_startup_files(run_dir: Path, allowed: set[str] = STARTUP_FILES) -> bool:
    """Whether `run_dir` holds nothing but what a run writes as it starts (.hydra/ with its YAML files)."""
    try:
        entries = {p.name for p in run_dir.iterdir()}
        hydra = list((run_dir / ".hydra").iterdir()) if (run_dir / ".hydra").is_dir() else []
    except OSError:
        return False
    return entries <= allowed and all(p.suffix == ".yaml" and p.is_file() for p in hydra)


def check_writable(run_dir: Path) -> None:
    """The run directory, or the nearest directory above it that exists, takes a new file: checked
    before any work and before anything is made, in one line, so that a bad output directory costs
    nothing. The reason is the system's, as making the directory would give it."""
    try:
        existing = next(p for p in [run_dir, *run_dir.parents] if p.exists() or p == Path(p.anchor))
        if not existing.is_dir():  # mkdir's own answers: the name is taken, or a file stands on the path
            code = errno.EEXIST if existing == run_dir else errno.ENOTDIR
            raise OSError(code, os.strerror(code))
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise UserError(f"{run_dir}: the run directory is not writable ({err.strerror or err})") from err


@dataclasses.dataclass(frozen=True)
class BeforeStart:
    """A run directory as it stood before this process's start wrote into it: a failed start takes back
    what is new since (Hydra's .hydra/ and train.log, the marker, the lock, the tokenizer files, the
    directory itself and the parents made for it), never a file or directory that was there."""

    run_dir: Path
    existing: Path  # run_dir itself, or the nearest directory above it that was there
    names: frozenset[str]  # what `existing` held
    hydra: frozenset[str]  # what run_dir/.hydra held

    @classmethod
    def of(cls, run_dir: Path) -> BeforeStart:
        run_dir = Path(run_dir).absolute()
        existing = next(p for p in [run_dir, *run_dir.parents] if os.path.isdir(p) or p == Path(p.anchor))
        return cls(run_dir, existing, _names(existing), _names(run_dir / ".hydra"))

    def named(self, run_dir: Path) -> BeforeStart:
        """The same moment, for a run directory Hydra named below this one since (a time-stamped one)."""
        run_dir = Path(run_dir).absolute()
        if run_dir == self.run_dir:
            return self
        if self.existing in run_dir.parents:
            return dataclasses.replace(self, run_dir=run_dir, hydra=frozenset())
        return BeforeStart.of(run_dir)  # elsewhere (Hydra resolved an interpolation): as it stands now

    @contextlib.contextmanager
    def taken_back_on_failure(self, holds: bool) -> Iterator[None]:
        """A failure in the body takes back what the start added, where this process `holds` the
        directory (its lock): otherwise the directory may be another run's."""
        try:
            yield
        except BaseException:
            if holds:
                self.take_back()
            raise

    def take_back(self) -> None:
        """Removes what the start added; the caller holds the directory's lock (no other run writes there)."""
        if self.existing != self.run_dir:
            _close_log_files_under(self.run_dir)
            shutil.rmtree(self.run_dir, ignore_errors=True)
            top = self.existing / self.run_dir.relative_to(self.existing).parts[0]
            if top.name not in self.names:  # the parents made for it go too, each one once empty
                for parent in self.run_dir.parents:
                    if parent == self.existing or not _remove_if_empty(parent):
                        break
            return
        new = [self.run_dir / n for n in _names(self.run_dir) - self.names]
        if ".hydra" in self.names:  # Hydra's own files of this start (a resumed run's .hydra/resumed-*)
            new += [self.run_dir / ".hydra" / n for n in _names(self.run_dir / ".hydra") - self.hydra]
        for path in new:
            _close_log_files_under(path)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _names(directory: Path) -> frozenset[str]:
    try:
        return frozenset(p.name for p in directory.iterdir())
    except OSError:
        return frozenset()


def _remove_if_empty(directory: Path) -> bool:
    try:
        directory.rmdir()
    except OSError:
        return False
    return True


def _close_log_files_under(path: Path) -> None:
    """Hydra's log handler on train.log goes before its file does: nothing more is written there."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        target = Path(handler.baseFilename)
        if target == path or path in target.parents:
            root.removeHandler(handler)
            handler.close()


def clear_leftovers(run_dir: Path, overwrite: bool) -> None:
    """Rank 0, holding the run directory's lock: an earlier run's files (`overwrite`: a new run with
    overwrite=true) and the unfinished writes of an interrupted one; then the marker that says the
    directory is a run's."""
    from seq2seq.artifacts.exports import remove_stale_export_directories  # when used, as command.py imports it

    if overwrite and (removed := clear_earlier_run(run_dir)):
        log.info("overwrite=true: removed the earlier run's %s from %s", ", ".join(removed), run_dir)
    if stale := RunDir(run_dir).remove_stale_temporaries():
        log.info("removed %s bytes of unfinished checkpoint writes from an interrupted run", f"{stale:,}")
    if stale := remove_stale_export_directories(run_dir):
        log.info("removed %s bytes of unfinished exports from an interrupted run", f"{stale:,}")
    if not (marker := RunDir(run_dir).marker).is_file():
        marker.write_text(MARKER_TEXT, encoding="utf-8")
