"""One way in to decoding: a decoding job (job.py: the model, the decoding settings, the engine
options) in, an engine out.

The model is what run= or checkpoint= name: a run directory, a training checkpoint (several,
comma-separated: an ensemble), a weights export (<run>/model/ or `seq2seq-export format=safetensors`),
a CTranslate2 export (<run>/ctranslate2/ or `format=ctranslate2`) or a Hugging Face Marian directory.
`load_engine` picks the engine by seq2seq-translate's rules (`seq2seq.inference.choice.choose_engine`)
and returns it: PyTorch's `Translator` or `CTranslate2Translator`, each saying which it is in `kind`.
seq2seq-translate, seq2seq-serve and the Python API's `load` come here; `Translator.load` and
`CTranslate2Translator.load` are the same with the engine forced, building their translator as this
does (`Translator.from_job`, `ctranslate2_engine.load_export`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seq2seq import cpu_sharing
from seq2seq.inference.choice import EngineChoice, choose_engine
from seq2seq.inference.ctranslate2_engine import EngineUnavailable, load_export
from seq2seq.inference.job import DecodingJob, decoding_job
from seq2seq.inference.translator_api import ENGINE_NAMES, TranslatorAPI, decoding_config

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger("seq2seq.translate")


def load(path: str | Path | Sequence[str | Path], **settings: Any) -> TranslatorAPI:
    """The engine seq2seq-translate decodes `path` with, set to `settings`: the keyword arguments of
    `seq2seq.inference.translator_api.decoding_config` (engine=auto unless given), with its defaults. Each
    item it translates must be one line, as for `Translator.load`."""
    return api_engine(decoding_job(decoding_config(path, **settings)))


def api_engine(job: DecodingJob) -> TranslatorAPI:
    """The engine of `job` as the Python API hands it out (`load`; seq2seq-distill's teacher): each item
    it translates must be one line."""
    engine = load_engine(job)
    engine.one_line_items = True
    return engine


def load_engine(job: DecodingJob) -> TranslatorAPI:
    """The engine `choose_engine` picks for `job`, loaded: CTranslate2 never imports torch (most of
    PyTorch's start-up; docs/performance.md), PyTorch's `Translator` decodes everything. Where
    CTranslate2 was only preferred as the faster engine and cannot run here (its CUDA libraries
    missing), PyTorch decodes instead."""
    choice = choose_engine(job)
    try:
        engine = _load(job, choice)
    except EngineUnavailable as err:
        if not choice.preferred_only:  # asked for, or needed by the settings (int8, an export given)
            raise
        choice = EngineChoice("torch", None, f"the run's CTranslate2 export cannot decode here: {err}")
        engine = _load(job, choice)
    # After loading: a bad file or setting is one line of error, not a line of log and one of error.
    log.info("engine: %s (%s)", ENGINE_NAMES[choice.engine], choice.why)
    if cpu_sharing.waiting == "short":  # the machine was shared at start
        log.info(cpu_sharing.describe_this_process())
    return engine


def _load(job: DecodingJob, choice: EngineChoice) -> TranslatorAPI:
    if choice.engine == "ctranslate2":
        return load_export(job, choice.model)
    from seq2seq.inference.translator import Translator  # here, not at the top: it imports torch

    return Translator.from_job(job)
