"""Whether a run's CTranslate2 export (`<run>/ctranslate2/`) can decode a request: it is there, made
from the run's checkpoint as it is now, the ctranslate2 package is installed, and, where the lines must
be PyTorch's, the request is one that CTranslate2 decodes alike. `choose_engine` (seq2seq-translate,
seq2seq-serve) and `CTranslate2Translator.from_config` (the Python API) both ask here, so they cannot
disagree. What is on the disk was read once, into a ResolvedModel (resolved_model.py); these functions
read no file. Imports neither torch nor either translator.
"""

from __future__ import annotations

from typing import Any

from seq2seq.config import UserError
from seq2seq.inference.resolved_model import ResolvedModel


def check_given_export(cfg: Any) -> None:
    """A CTranslate2 export given by hand (checkpoint=) decodes what `cfg` asks, or a one-line UserError."""
    if cfg.attention:
        raise UserError(f"config error: attention={cfg.attention!r}: not with a CTranslate2 model")


def checked_export(cfg: Any, files: ResolvedModel) -> str:
    """engine=ctranslate2 on a run: its export, or a one-line UserError saying why it cannot decode
    this request as PyTorch would."""
    unfit = why_not_ctranslate2(cfg, files)
    if unfit is not None:
        raise UserError(f"config error: engine=ctranslate2: {unfit}")
    return str(files.export)


def int8_export(cfg: Any, files: ResolvedModel) -> str:
    """precision=int8: the run's CTranslate2 export, quantised as it loads, or a one-line UserError. (Its
    speed against fp32 is said where it loads: ctranslate2_engine.say_if_int8_is_slower.)"""
    unfit = why_not_ctranslate2(cfg, files, same_lines=False)
    if unfit is not None:
        raise UserError(f"config error: precision=int8 decodes a run's CTranslate2 export: {unfit}")
    return str(files.export)


def why_not_ctranslate2(cfg: Any, files: ResolvedModel, same_lines: bool = True) -> str | None:
    """None when the run's CTranslate2 export (as `files` found it) can decode this request (as PyTorch
    would, with `same_lines`); else why not. Reads no file."""
    if files.checkpoint or not files.run:
        return "checkpoint= is a PyTorch checkpoint (run= decodes with the run's CTranslate2 export)"
    if cfg.attention:
        return "attention= plots PyTorch's attention"
    if same_lines and (reason := _why_other_lines(cfg)):
        return reason
    if files.export_error is not None:
        raise files.export_error
    return files.export_unfit


def _why_other_lines(cfg: Any) -> str | None:
    """Why CTranslate2 would write other lines (or scores) than PyTorch for this request, if it would."""
    if cfg.sampling:
        return "sampling=true (CTranslate2 draws other samples from the same seed)"
    if cfg.nbest > 1:
        return "nbest>1 (CTranslate2's scores differ in the third decimal)"
    if cfg.prefix and cfg.beam > 1:  # seen in tests/test_translation_api.py: other lines, not only other scores
        return "prefix=true with beam>1 (CTranslate2 ranks hypotheses that extend a prefix differently)"
    if cfg.precision not in ("auto", "fp32"):
        return f"precision={cfg.precision} (the export is fp32)"
    return None
