"""Whether a run's CTranslate2 export (`<run>/ctranslate2/`) can decode a request: it is there, made
from the run's checkpoint as it is now, the ctranslate2 package is installed, and, where the lines must
be PyTorch's, the request is one that CTranslate2 decodes alike. `choose_engine` (seq2seq-translate,
seq2seq-serve) and `CTranslate2Translator.from_config` (the Python API) both ask here, so they cannot
disagree. What is on the disk was read once, into a ResolvedModel (resolved_model.py); these functions
read no file but the int8 probe's cached timing. Imports neither torch nor either translator: the
probe that times precision=int8 is given a function that loads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from seq2seq.config import UserError
from seq2seq.inference import engine_probe
from seq2seq.inference.engine_api import TranslatorAPI
from seq2seq.inference.resolved_model import ResolvedModel

log = logging.getLogger("seq2seq.translate")


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


def int8_export(cfg: Any, files: ResolvedModel, load: Callable[[str], TranslatorAPI]) -> str:
    """precision=int8: the run's CTranslate2 export, quantised as it loads, or a one-line UserError; a
    warning where int8 is slower than fp32 on this CPU (timed once with the translators `load` gives
    for "ctranslate2" and "int8", cached)."""
    unfit = why_not_ctranslate2(cfg, files, same_lines=False)
    if unfit is not None:
        raise UserError(f"config error: precision=int8 decodes a run's CTranslate2 export: {unfit}")
    timing = engine_probe.cached_timing(cfg, ("ctranslate2", "int8"), load)
    fp32, int8 = timing.seconds["ctranslate2"], timing.seconds["int8"]
    if int8 > fp32:
        log.warning(
            "precision=int8 is slower than fp32 on this CPU: %.2f s against %.2f s for the same %d sentences "
            "(measured once, cached in %s); precision=auto decodes faster here",
            int8,
            fp32,
            engine_probe.PROBE_SENTENCES,
            engine_probe.cache_file(),
        )
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
