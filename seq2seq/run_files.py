"""Where a run directory keeps what translation reads, found without importing torch (the
CTranslate2 path of `seq2seq-translate` starts in well under a second because it never does)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from seq2seq.config import UserError

INFERENCE_DIR = "model"  # <run>/model/: the weights-only export training writes at its end
CTRANSLATE2_DIR = "ctranslate2"  # <run>/ctranslate2/: its CTranslate2 export (with ctranslate2 installed)


def find_checkpoint(run_dir: str | Path, prefer: tuple[str, ...] = ("best", "last")) -> Path:
    directory = Path(run_dir)
    if not directory.is_dir():
        raise UserError(f"{directory}: no such run directory")
    for name in prefer:
        candidate = directory / "checkpoints" / f"{name}.pt"
        if candidate.is_file():
            return candidate
    raise UserError(f"{directory}: has no checkpoint (looked for checkpoints/{{{','.join(prefer)}}}.pt)")


def is_current(export_file: Path, checkpoint: Path) -> bool:
    """An export written at the end of training is current unless its checkpoint is newer (a resumed
    run that was stopped before its end: its exports are of the earlier best checkpoint)."""
    with contextlib.suppress(OSError):
        return export_file.stat().st_mtime >= checkpoint.stat().st_mtime
    return False
