"""Every path of a run directory, named here once (no torch: the CTranslate2 path of
`seq2seq-translate` and the start-up checks of `seq2seq-train` read it before torch would load).

    <run>/checkpoints/   best.pt, last.pt, step_N.pt (the newest keep_checkpoints), averaged.pt
                         (seq2seq-average's default output), .NAME.pt.*.tmp (a crash-safe save under
                         way, or one a killed process left)
    <run>/model/         the weights-only export that translation loads, with the tokenizer
    <run>/ctranslate2/   its CTranslate2 export, with the tokenizer
    <run>/tb/            TensorBoard's event files
    <run>/tokenizer.json (or tokenizer.src.json + tokenizer.tgt.json, or SentencePiece's files)
    <run>/cleaning.json  data.clean's report: each rule's drops per corpus, with samples
    <run>/.seq2seq-run   the marker every run writes as it takes the directory
    <run>/.lock          one run per directory (seq2seq/train/lock.py)
    <run>/.hydra/, <run>/train.log   Hydra's: never removed by a run
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path

from seq2seq.artifacts.file_lock import FOLDER_LOCK
from seq2seq.artifacts.freshness import why_stale
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, DECODING_FILE, WEIGHTS_CONFIG, WEIGHTS_FILE
from seq2seq.config import UserError
from seq2seq.data.sentencepiece import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, VOCAB
from seq2seq.data.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE

CHECKPOINTS_DIR = "checkpoints"
INFERENCE_DIR = "model"  # the weights-only export training writes at its end
CTRANSLATE2_DIR = "ctranslate2"  # its CTranslate2 export (with ctranslate2 installed)
DASHBOARD_DIR = "tb"
RUN_MARKER = ".seq2seq-run"  # written by every run as it takes its directory (train())
MARKER_TEXT = "a seq2seq-train run directory: overwrite=true removes only the files such a run writes\n"
CLEANING_REPORT = "cleaning.json"  # data.clean's report, copied from the data cache
# Every file a tokenizer of this project may be saved as (one layout or another), in a run directory
# and in its exports.
TOKENIZER_FILES = (JOINT_FILE, SRC_FILE, TGT_FILE, SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB)
CT2_VOCABULARIES = tuple(
    f"{side}_vocabulary.{ext}" for side in ("shared", "source", "target") for ext in ("json", "txt")
)
# What a run directory holds before any training: Hydra's config and log, the lock, the marker.
STARTUP_FILES = {".hydra", "train.log", FOLDER_LOCK, RUN_MARKER}
LOCK_FREE_STARTUP_FILES = {".hydra", "train.log"}  # ... and that no run has locked yet

_PERIODIC = re.compile(r"step_(\d+)")  # step_N: the periodic checkpoint of update N
PERIODIC_GLOB = "step_*.pt"  # the periodic checkpoints, as messages name them
# The suffix of a new file or folder written beside what it replaces (replacing.temporary_affixes):
# what remove_stale_temporaries finds of a killed writer's.
TEMPORARY_SUFFIX = ".tmp"
# replacing.write_files_into's new folder in the run directory: .staging.XXXX.tmp, left only by a kill
STAGING_NAME = "staging"

# Each directory a run writes, and the names of the files it writes there.
RUN_DIRECTORIES: dict[str, re.Pattern[str]] = {
    # best, last, step_N and seq2seq-average's default output; .NAME.pt.*.tmp: an unfinished save;
    # .averaged.pt.lock: the lock of its writer (replacing.py), left only by a killed one
    CHECKPOINTS_DIR: re.compile(
        rf"(best|last|{_PERIODIC.pattern}|averaged)\.pt|\..+\.pt\..+\.tmp|\.averaged\.pt\.lock"
    ),
    INFERENCE_DIR: re.compile("|".join(map(re.escape, (WEIGHTS_FILE, WEIGHTS_CONFIG, *TOKENIZER_FILES)))),
    CTRANSLATE2_DIR: re.compile(
        "|".join(map(re.escape, (CTRANSLATE2_FILE, "config.json", DECODING_FILE, *CT2_VOCABULARIES, *TOKENIZER_FILES)))
    ),
    DASHBOARD_DIR: re.compile(r"events\.out\.tfevents\..+"),
}


class RunDir:
    """The paths of one run directory (existing or not); `root` is the directory itself."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def model(self) -> Path:
        return self.root / INFERENCE_DIR

    @property
    def ctranslate2(self) -> Path:
        return self.root / CTRANSLATE2_DIR

    @property
    def tb(self) -> Path:
        return self.root / DASHBOARD_DIR

    @property
    def marker(self) -> Path:
        return self.root / RUN_MARKER

    @property
    def lock(self) -> Path:
        return self.root / FOLDER_LOCK

    @property
    def cleaning_report(self) -> Path:
        return self.root / CLEANING_REPORT

    def checkpoint(self, name: str) -> Path:
        """checkpoints/<name>.pt: name is best, last, averaged or a `step_name`."""
        return self.checkpoints / f"{name}.pt"

    @staticmethod
    def step_name(step: int) -> str:
        """The name of update `step`'s periodic checkpoint."""
        return f"step_{step}"

    @staticmethod
    def step_of(path: str | Path) -> int | None:
        """The update of a periodic checkpoint (a step_N.pt file or a step_N name); None for any other."""
        name = Path(path).name
        found = _PERIODIC.fullmatch(name.removesuffix(".pt"))
        return int(found.group(1)) if found else None

    def periodic_checkpoints(self) -> list[Path]:
        """The run's step_N.pt files, oldest update first (by N, not by name: step_10 after step_9)."""
        found = [(step, p) for p in self.checkpoints.glob(PERIODIC_GLOB) if (step := self.step_of(p)) is not None]
        return [path for _, path in sorted(found)]

    def prune_periodic(self, keep: int) -> None:
        """Removes all but the newest `keep` periodic checkpoints (keep_checkpoints)."""
        periodic = self.periodic_checkpoints()
        for old in periodic[: max(len(periodic) - keep, 0)]:
            old.unlink(missing_ok=True)

    def has_checkpoints(self) -> bool:
        return self.checkpoints.is_dir()

    def find_checkpoint(self, prefer: tuple[str, ...] = ("best", "last")) -> Path:
        """The first of checkpoints/<prefer>.pt that exists; a one-line error when none does."""
        if not self.root.is_dir():
            raise UserError(f"{self.root}: no such run directory")
        for name in prefer:
            if (candidate := self.checkpoint(name)).is_file():
                return candidate
        raise UserError(f"{self.root}: has no checkpoint (looked for {CHECKPOINTS_DIR}/{{{','.join(prefer)}}}.pt)")

    def model_file(self) -> Path:
        """What translation loads from the run: the weights-only file that training writes at its end
        (model/model.safetensors, a quarter of the checkpoint's size: no optimiser moments), unless it
        was made from another checkpoint than the run's best (a resumed run that was stopped before its
        end); else best.pt, else last.pt."""
        checkpoint = self.find_checkpoint()
        weights = self.model / WEIGHTS_FILE
        fresh = weights.is_file() and why_stale(weights.parent / WEIGHTS_CONFIG, checkpoint) is None
        return weights if fresh else checkpoint

    def relative(self, path: Path) -> str:
        """`path` as the run's messages name it: checkpoints/last.pt."""
        return path.relative_to(self.root).as_posix()

    def remove_stale_temporaries(self) -> int:
        """Deletes the temporaries in checkpoints/ of saves that a killed process never finished;
        returns their total size. Call it only while holding the run directory's lock (no save can be
        under way)."""
        removed = 0
        for tmp in self.checkpoints.glob(f".*.pt.*{TEMPORARY_SUFFIX}"):
            with contextlib.suppress(OSError):
                size = tmp.stat().st_size
                tmp.unlink()
                removed += size
        for staging in self.root.glob(f".{STAGING_NAME}.*{TEMPORARY_SUFFIX}"):
            if staging.is_dir() and not staging.is_symlink():
                removed += sum(path.stat().st_size for path in staging.rglob("*") if path.is_file())
                shutil.rmtree(staging, ignore_errors=True)
        return removed
