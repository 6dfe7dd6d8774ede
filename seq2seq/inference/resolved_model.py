"""What a decoding job's run= and checkpoint= name, read from the disk once: a frozen description
that the engine choice (choice.py) decides on without reading the disk again, and that a server
keeps for its life, choosing per request without a file system call.

A bad name fails here, in one line naming the file: an Argos package (neither engine reads one).
Imports neither torch nor ctranslate2.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from seq2seq.artifacts.freshness import why_stale
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, DECODING_FILE, PathKind, argos_package_error, path_kind
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, RunDir
from seq2seq.config import UserError


@dataclass(frozen=True)
class ResolvedModel:
    run: str | None
    checkpoint: str | None  # as given: a checkpoint, several comma-separated, or an export
    given_export: bool  # checkpoint= names one CTranslate2 export (several are a PyTorch ensemble)
    given_export_stale: str | None  # checkpoint=<run>/ctranslate2 made from another checkpoint: why
    export: str | None  # the run's CTranslate2 export directory (run= alone)
    # Why that export cannot decode this model (missing, stale, the package not installed); None: it can,
    # for the requests CTranslate2 decodes alike (choice.why_not_ctranslate2), or there is none.
    export_unfit: str | None
    # The run's export exists but its checkpoint could not be read: raised when the export is chosen,
    # as a choice that needed it always did (engine=torch never reads it).
    export_error: UserError | None = None
    # The export is of a pretrained NLLB-200/M2M-100/mBART-50 model (data.lang_tag=language_codes): its
    # beam search keeps CTranslate2's own rules, not generate's (choice.why_not_ctranslate2).
    export_language_codes: bool = False
    # run= alone: the file PyTorch decodes (RunDir.model_file) and its (mtime_ns, size) when resolved;
    # None where the run has none (loading it then says so, as it did).
    model_file: str | None = None
    model_stamp: tuple[int, int] | None = None

    def unchanged_model_file(self) -> str | None:
        """The run's model file as resolved, or a one-line UserError where it was replaced since: a
        server loads PyTorch's engine at its first n-best request, and must decode with the model that
        its CTranslate2 export, loaded at start, was made from, not one that a training wrote later."""
        now = _stamp(Path(self.model_file)) if self.model_file is not None else None
        if now is not None and now != self.model_stamp:  # a file gone is for its reader to say
            raise UserError(
                f"{self.model_file}: written again since the model was loaded; PyTorch would decode another "
                "model than the one loaded then (restart to decode with the new one)"
            )
        return self.model_file


def resolve(run: str | None, checkpoint: str | None) -> ResolvedModel:
    """The description of what run= and checkpoint= (as a command or the API gives them) name."""
    checkpoint = str(checkpoint or "") or None
    run = str(run) if run else None
    kind = path_kind(checkpoint) if checkpoint else None  # it reads the path: once
    if kind is PathKind.ARGOS:
        raise argos_package_error(checkpoint)
    given = kind is PathKind.CTRANSLATE2 and "," not in checkpoint
    if checkpoint or not run:
        stale = _given_export_stale(Path(checkpoint)) if given else None
        return ResolvedModel(run, checkpoint, given, stale, None, None)
    export = Path(run) / CTRANSLATE2_DIR
    unfit, error = None, None
    if not (export / CTRANSLATE2_FILE).is_file():
        unfit = f"{export} does not exist (training writes it when ctranslate2 is installed)"
    else:
        try:
            unfit = why_stale(export / DECODING_FILE, RunDir(run).find_checkpoint())
        except UserError as err:
            error = err
    if unfit is None and error is None and not ctranslate2_installed():
        unfit = "the ctranslate2 package is not installed (pip install 'seq2seq[export]')"
    model_file, stamp = _model_file(run)
    codes = unfit is None and error is None and _lang_tag(export / DECODING_FILE) == "language_codes"
    return ResolvedModel(
        run,
        checkpoint=None,
        given_export=False,
        given_export_stale=None,
        export=str(export),
        export_unfit=unfit,
        export_error=error,
        export_language_codes=codes,
        model_file=model_file,
        model_stamp=stamp,
    )


def _lang_tag(record_file: Path) -> str | None:
    """data.lang_tag of an export's seq2seq.json (None where it has none or cannot be read: the engine says why)."""
    try:
        data = json.loads(record_file.read_text(encoding="utf-8")).get("data")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return data.get("lang_tag") if isinstance(data, dict) else None


def _model_file(run: str) -> tuple[str | None, tuple[int, int] | None]:
    try:
        path = RunDir(run).model_file()
    except UserError:
        return None, None
    return str(path), _stamp(path)


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size): a file written again, by an atomic replace or in place, has another."""
    try:
        status = path.stat()
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size


def ctranslate2_installed() -> bool:
    return importlib.util.find_spec("ctranslate2") is not None


def _given_export_stale(export: Path) -> str | None:
    """<run>/ctranslate2 given by hand: why, if the run has a newer checkpoint than the export."""
    run = RunDir(export.parent)
    if not run.has_checkpoints():
        return None  # an export kept somewhere else: nothing to compare it with
    try:
        return why_stale(export / DECODING_FILE, run.find_checkpoint())
    except UserError:
        return None
