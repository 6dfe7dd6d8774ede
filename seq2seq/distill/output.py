"""The output folder, end to end: made by this command (its marker says so), held by one process at a
time, resumed by it, never taken over; what each step left in it read back, and the command's log.

A folder that exists without the marker and holds anything is someone else's: refused, nothing written.
settings.json keeps what decides the folder's contents; a rerun with others would mix two
distillations in one folder, and is refused with the key that differs. The teacher is kept by its
weights too (each file's SHA-256): a teacher whose files now hold other weights is refused by file.
state.json adds up each step's seconds over the runs that did it; result.json is the last step's.
Every JSON file here is written by replacing.write_new_json and read back by `read_json`; the
teacher's cache folders (translations.py) are held the same way (file_lock.held) and read by it too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seq2seq.artifacts import file_lock
from seq2seq.artifacts.replacing import claim_folder, write_new_json
from seq2seq.config import UserError

log = logging.getLogger("seq2seq.distill")
COMMAND = "seq2seq-distill"  # how the folder's lock and marker name their writer
MARKER = ".seq2seq-distill"
MARKER_TEXT = "a seq2seq-distill output folder: rerun the same command to resume it\n"
SETTINGS, STATE, RESULT, LOG = "settings.json", "state.json", "result.json", "distill.log"
# Hydra's job-log format: distill.log, and a student's train.log, read as the train.log of a seq2seq-train run.
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class OutputFolder:
    """The output folder while `opened` holds it: the seconds each step took (state.json) and the
    result of a finished distillation (result.json)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.state = read_json(path / STATE) if (path / STATE).is_file() else {"seconds": {}}

    def finished(self) -> dict[str, Any] | None:
        """result.json's contents when an earlier run finished, else None."""
        return read_json(self.path / RESULT) if (self.path / RESULT).is_file() else None

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Adds the step's wall-clock seconds in this run to state.json (a resumed step's add up)."""
        began = time.monotonic()
        try:
            yield
        finally:
            seconds = self.state["seconds"]
            seconds[name] = round(seconds.get(name, 0.0) + time.monotonic() - began, 1)
            write_new_json(self.path / STATE, self.state)

    def finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """result.json: `result` with the steps' seconds."""
        result["seconds"] = self.state["seconds"]
        write_new_json(self.path / RESULT, result)
        log.info("teacher against student: %s", self.path / RESULT)
        return result


@contextlib.contextmanager
def opened(path: Path, settings: dict[str, Any]) -> Iterator[OutputFolder]:
    """The output folder, this command's (claim_output), held for the block, logged into, and holding
    a distillation of `settings` (check_settings)."""
    resumed = claim_output(path)
    with file_lock.held(path, COMMAND, "a distillation"), _logging(path / LOG):
        check_settings(path, settings)
        log.info("%s %s", "resuming" if resumed else "distilling into", path)
        yield OutputFolder(path)


def claim_output(path: Path) -> bool:
    """Makes `path` this command's, or finds it already is (the rule of replacing.claim_folder); True
    when it resumes an earlier run's."""
    return claim_folder(path, "output", COMMAND, MARKER, MARKER_TEXT)


def check_settings(path: Path, settings: dict[str, Any]) -> None:
    """The first run records `settings`; a rerun must give the same."""
    file = path / SETTINGS
    before = read_json(file) if file.is_file() else None
    if before is not None:
        if "teacher_weights" in before:
            check_teacher_weights(path, before["teacher_weights"], settings["teacher_weights"])
        for key in sorted((set(before) | set(settings)) - {"teacher_weights"}):  # those by content, above
            if before.get(key) != settings.get(key):
                raise UserError(
                    f"output={path}: holds a distillation with {key}={before.get(key)!r}, not {settings.get(key)!r}; "
                    "rerun it as it was, or give a new output="
                )
    if before is None:
        write_new_json(file, settings)
    elif "teacher_weights" not in before:  # a folder from before they were recorded: nothing to compare yet
        write_new_json(file, {**before, "teacher_weights": settings["teacher_weights"]})


def check_teacher_weights(path: Path, before: list[dict[str, str]], now: list[dict[str, str]]) -> None:
    """The teacher's weight files hold what they held when the folder was made, by content: the same
    files elsewhere are the same teacher. (Another number of files is another teacher= path, which
    check_settings names.)"""
    for then, current in zip(before, now, strict=False):
        if then["sha256"] != current["sha256"]:
            raise UserError(
                f"output={path}: was distilled from the teacher's weights in {then['file']} (sha256 "
                f"{then['sha256'][:12]}); the teacher's are now {current['file']}, other weights (sha256 "
                f"{current['sha256'][:12]}): what the folder holds is the old teacher's; put that teacher back "
                "to resume it, or give a new output= for this one"
            )


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{path}: unreadable ({err}); it is this command's state: remove the folder to start over"
        ) from err


@contextlib.contextmanager
def _logging(path: Path) -> Iterator[None]:
    """Every seq2seq logger's INFO and above into `path` and onto stderr for the command's life."""
    logger = logging.getLogger("seq2seq")
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8"), logging.StreamHandler(sys.stderr)]
    level = logger.level
    logger.setLevel(logging.INFO)
    for handler in handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(level)
