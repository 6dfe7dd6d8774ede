"""The output folder: made by this command (its marker says so), resumed by it, never taken over.

A folder that exists without the marker and holds anything is someone else's: refused, nothing written.
settings.json keeps what decides the folder's contents; a rerun with others would mix two
distillations in one folder, and is refused with the key that differs. The teacher is kept by its
weights too (each file's SHA-256): a teacher whose files now hold other weights is refused by file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seq2seq.artifacts.replacing import claim_folder, write_new_json
from seq2seq.config import UserError
from seq2seq.distill.files import read_json

MARKER = ".seq2seq-distill"
MARKER_TEXT = "a seq2seq-distill output folder: rerun the same command to resume it\n"
SETTINGS = "settings.json"


def claim_output(path: Path) -> bool:
    """Makes `path` this command's, or finds it already is (the rule of replacing.claim_folder); True
    when it resumes an earlier run's."""
    return claim_folder(path, "output", "seq2seq-distill", MARKER, MARKER_TEXT)


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
