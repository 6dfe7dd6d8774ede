"""The distillation's state: its JSON files read back (replacing.write_new_json writes them), its text
files written whole, and a folder held by one process at a time."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from seq2seq.artifacts import file_lock
from seq2seq.artifacts.replacing import write_new_text
from seq2seq.config import UserError


def write_lines(path: Path, lines: list[str]) -> None:
    """A text file of `lines`, replaced whole (replacing.write_new_text)."""
    write_new_text(path, "".join(f"{line}\n" for line in lines))


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(
            f"{path}: unreadable ({err}); it is this command's state: remove the folder to start over"
        ) from err


@contextlib.contextmanager
def held(folder: Path, what: str) -> Iterator[None]:
    """The folder's lock for the block: a second seq2seq-distill writing there is refused in one line.
    The kernel drops the lock however the process ends, so a killed run never blocks the next."""
    try:
        fd = file_lock.acquire(folder / file_lock.FOLDER_LOCK, "seq2seq-distill")
    except file_lock.Busy:
        raise UserError(f"{folder}: another seq2seq-distill is writing {what} there; wait for it") from None
    try:
        yield
    finally:
        file_lock.release(fd, folder / file_lock.FOLDER_LOCK)
