"""Whether a run's CTranslate2 export (`<run>/ctranslate2/`) can decode a request: it is there, made
from the run's checkpoint as it is now, the ctranslate2 package is installed, and, where the lines must
be PyTorch's, the request is one that CTranslate2 decodes alike. `choose_engine` (seq2seq-translate,
seq2seq-serve) and `CTranslate2Translator.from_config` (the Python API) both ask here, so they cannot
disagree. Imports neither torch nor either translator: the probe that times precision=int8 is given
a function that loads them.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seq2seq.artifacts.freshness import why_stale
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, DECODING_FILE, PathKind, argos_package_error, path_kind
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, RunDir
from seq2seq.config import UserError
from seq2seq.inference import engine_probe
from seq2seq.inference.translation import TranslatorAPI

log = logging.getLogger("seq2seq.translate")


def given_export(cfg: Any) -> bool:
    """checkpoint= names one CTranslate2 export (several, comma-separated, are a PyTorch ensemble)."""
    checkpoint = str(cfg.checkpoint or "")
    return bool(checkpoint) and "," not in checkpoint and path_kind(checkpoint) is PathKind.CTRANSLATE2


def checked_export(cfg: Any) -> str:
    """engine=ctranslate2 on a run: its export, or a one-line UserError saying why it cannot decode
    this request as PyTorch would."""
    unfit = why_not_ctranslate2(cfg)
    if unfit is not None:
        raise UserError(f"config error: engine=ctranslate2: {unfit}")
    return str(Path(cfg.run) / CTRANSLATE2_DIR)


def int8_export(cfg: Any, load: Callable[[str], TranslatorAPI]) -> str:
    """precision=int8: the run's CTranslate2 export, quantised as it loads, or a one-line UserError; a
    warning where int8 is slower than fp32 on this CPU (timed once with the translators `load` gives
    for "ctranslate2" and "int8", cached)."""
    unfit = why_not_ctranslate2(cfg, same_lines=False)
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
    return str(Path(cfg.run) / CTRANSLATE2_DIR)


def why_not_ctranslate2(cfg: Any, same_lines: bool = True) -> str | None:
    """None when the run's CTranslate2 export can decode this request (as PyTorch would, with
    `same_lines`); else why not. An Argos package given is an error at once: neither engine reads one."""
    if cfg.checkpoint and path_kind(str(cfg.checkpoint)) is PathKind.ARGOS:
        raise argos_package_error(cfg.checkpoint)
    if cfg.checkpoint or not cfg.run:
        return "checkpoint= is a PyTorch checkpoint (run= decodes with the run's CTranslate2 export)"
    if cfg.attention:
        return "attention= plots PyTorch's attention"
    if same_lines and (reason := _why_other_lines(cfg)):
        return reason
    export = Path(cfg.run) / CTRANSLATE2_DIR / CTRANSLATE2_FILE
    if not export.is_file():
        return f"{export.parent} does not exist (training writes it when ctranslate2 is installed)"
    if stale := why_stale(export.parent / DECODING_FILE, RunDir(cfg.run).find_checkpoint()):
        return stale
    if not ctranslate2_installed():
        return "the ctranslate2 package is not installed (pip install 'seq2seq[export]')"
    return None


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


def ctranslate2_installed() -> bool:
    return importlib.util.find_spec("ctranslate2") is not None
