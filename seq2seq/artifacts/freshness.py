"""Whether an export was made from a checkpoint as it is now, told without importing torch (the
CTranslate2 path of `seq2seq-translate` starts in well under a second because it never does)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path


def checkpoint_fingerprint(checkpoint: Path) -> str | None:
    """The identity of one saved checkpoint, read without torch and without reading its tensors: a
    checkpoint is a zip whose directory holds the CRC-32 and size of every record (the pickled step
    and config, each tensor, a serialization id unique to the save). A copy keeps it; a new save changes it."""
    try:
        with zipfile.ZipFile(checkpoint) as archive:
            # The first path component is the archive's name, which depends on how it was saved, not on what.
            entries = sorted((i.filename.partition("/")[2], i.CRC, i.file_size) for i in archive.infolist())
    except (OSError, zipfile.BadZipFile):
        return None
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def checkpoint_record(checkpoint: Path, step: int) -> dict[str, object]:
    """What an export records about the checkpoint it was made from (see why_stale)."""
    return {
        "step": step,
        "source_checkpoint": str(checkpoint),
        "checkpoint_fingerprint": checkpoint_fingerprint(checkpoint),
    }


def why_stale(record_file: Path, checkpoint: Path) -> str | None:
    """None when the export that `record_file` (a JSON file inside it) describes was made from
    `checkpoint` as it is now; else why not. File times cannot say: `cp -r` renews them, so a stale
    export copied after its checkpoint looked current."""
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        record = None
    if not isinstance(record, dict) or not record.get("checkpoint_fingerprint"):
        return f"{record_file.parent} does not record the checkpoint it was made from"
    if record["checkpoint_fingerprint"] != checkpoint_fingerprint(checkpoint):
        return (
            f"{record_file.parent} was made from update {record.get('step')} of another checkpoint than {checkpoint} "
            "(a resumed run stopped before its end)"
        )
    return None
