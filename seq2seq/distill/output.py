"""The output folder: made by this command (its marker says so), resumed by it, never taken over.

A folder that exists without the marker and holds anything is someone else's: refused, nothing written.
settings.json keeps what decides the folder's contents; a rerun with others would mix two
distillations in one folder, and is refused with the key that differs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seq2seq.config import UserError
from seq2seq.distill.files import read_json, write_json

MARKER = ".seq2seq-distill"
MARKER_TEXT = "a seq2seq-distill output folder: rerun the same command to resume it\n"
SETTINGS = "settings.json"


def claim_output(path: Path) -> bool:
    """Makes `path` this command's, or finds it already is; True when it resumes an earlier run's."""
    if path.exists() and not path.is_dir():
        raise UserError(f"output={path}: is a file; give a new folder")
    if (path / MARKER).is_file():
        return True
    if path.is_dir() and any(path.iterdir()):
        raise UserError(f"output={path}: holds files seq2seq-distill did not write; give a new folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
    except OSError as err:
        raise UserError(f"output={path}: cannot write there ({err.strerror or err})") from err
    return False


def check_settings(path: Path, settings: dict[str, Any]) -> None:
    """The first run records `settings`; a rerun must give the same."""
    file = path / SETTINGS
    if not file.is_file():
        write_json(file, settings)
        return
    before = read_json(file)
    for key in sorted(set(before) | set(settings)):
        if before.get(key) != settings.get(key):
            raise UserError(
                f"output={path}: holds a distillation with {key}={before.get(key)!r}, not {settings.get(key)!r}; "
                "rerun it as it was, or give a new output="
            )
