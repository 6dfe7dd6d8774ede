"""Which engine `seq2seq-translate` decodes with: PyTorch (`Translator`) or CTranslate2
(`CTranslate2Translator`), chosen without importing torch.

engine=auto (the default) decodes a run with its CTranslate2 export, `<run>/ctranslate2/`, which
training writes when ctranslate2 is installed, wherever that gives the lines PyTorch gives, only
faster: the best translation by greedy or beam search, a forced prefix in greedy search, fp32.
Everything else stays on PyTorch: n-best lists (their scores now agree to rounding, both engines
renormalising after banning <pad> and <s>, but CTranslate2's lists are not yet checked against
PyTorch's under every setting), a prefix in beam search (CTranslate2 ranks the
hypotheses that extend it otherwise), sampling (its sampler draws other samples from the same seed),
attention plots, ensembles, bf16/fp16, an export made from another checkpoint than the run's (by the
record inside the export). The log says which engine decodes and why; engine=torch or
engine=ctranslate2 forces one.

precision=auto decodes in fp32 everywhere (seq2seq/precision.py, choose_decoding_precision: bf16
lines change with their batch-mates), where the export is the faster engine; PyTorch decodes in bf16
or fp16 when asked (precision=bf16), faster on some CPUs and GPUs, with that warning.
The measurements behind these rules: docs/performance.md.

precision=int8 is CTranslate2's alone (its weights quantised to 8 bits as the export loads): the lines
then differ from fp32 by choice, so n-best, sampling and prefixes decode with it too. Where it loads,
it is timed against fp32 once per machine and model, and a warning says so where it is slower.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from seq2seq.config import UserError
from seq2seq.inference.job import DecodingJob

log = logging.getLogger("seq2seq.translate")
EXPORT_REASON = "the run's CTranslate2 export; engine=torch for PyTorch"


@dataclass(frozen=True)
class EngineChoice:
    engine: str  # "torch" or "ctranslate2"
    model: str | None  # the CTranslate2 model directory; None for torch (run= or checkpoint= as given)
    why: str  # for the log
    # CTranslate2 taken as the faster engine, not because the settings need it: where it cannot run
    # (its CUDA libraries missing), PyTorch decodes instead (seq2seq.inference.loading).
    preferred_only: bool = False


def choose_engine(job: DecodingJob) -> EngineChoice:
    """The engine and model that `job` decodes with, decided on its resolved model (read once) without
    reading the disk. A forced engine that cannot decode what was asked is a one-line UserError naming
    the key."""
    files, engine = job.model, job.engine
    if files.given_export:  # a CTranslate2 export given by hand
        if engine == "torch":
            raise UserError(f"config error: engine=torch: checkpoint={files.checkpoint} is a CTranslate2 model")
        if job.attention:
            raise UserError(f"config error: attention={job.attention!r}: not with a CTranslate2 model")
        if files.given_export_stale:
            log.warning("%s: it decodes that model", files.given_export_stale)
        return EngineChoice("ctranslate2", str(files.checkpoint), "checkpoint= is a CTranslate2 model")
    if job.options.precision == "int8":
        if engine == "torch":
            raise UserError("config error: engine=torch: precision=int8 is CTranslate2's (engine=auto or ctranslate2)")
        model = _int8_export(job)
        return EngineChoice("ctranslate2", model, "precision=int8 is CTranslate2's")
    if engine == "torch":
        return EngineChoice("torch", None, "engine=torch")
    if engine == "ctranslate2":
        return EngineChoice("ctranslate2", _checked_export(job), EXPORT_REASON)
    unfit = why_not_ctranslate2(job)
    if unfit is not None:
        return EngineChoice("torch", None, unfit)
    return EngineChoice("ctranslate2", str(files.export), EXPORT_REASON, preferred_only=True)


# Whether a run's CTranslate2 export can decode a request: it is there, made from the run's checkpoint as
# it is now, the ctranslate2 package is installed, and, where the lines must be PyTorch's, the request is
# one that CTranslate2 decodes alike. Read from the ResolvedModel: no file.


def _checked_export(job: DecodingJob) -> str:
    """engine=ctranslate2 on a run: its export, or a one-line UserError saying why it cannot decode
    this request as PyTorch would."""
    unfit = why_not_ctranslate2(job)
    if unfit is not None:
        raise UserError(f"config error: engine=ctranslate2: {unfit}")
    return str(job.model.export)


def _int8_export(job: DecodingJob) -> str:
    """precision=int8: the run's CTranslate2 export, quantised as it loads, or a one-line UserError. (Its
    speed against fp32 is said where it loads: ctranslate2_engine.say_if_int8_is_slower.)"""
    unfit = why_not_ctranslate2(job, same_lines=False)
    if unfit is not None:
        raise UserError(f"config error: precision=int8 decodes a run's CTranslate2 export: {unfit}")
    return str(job.model.export)


def why_not_ctranslate2(job: DecodingJob, same_lines: bool = True) -> str | None:
    """None when the run's CTranslate2 export (as the job's model found it) can decode this request (as
    PyTorch would, with `same_lines`); else why not. Reads no file."""
    files = job.model
    if files.checkpoint or not files.run:
        return "checkpoint= is a PyTorch checkpoint (run= decodes with the run's CTranslate2 export)"
    if job.attention:
        return "attention= plots PyTorch's attention"
    if same_lines and (reason := _why_other_lines(job)):
        return reason
    if same_lines and job.settings.beam > 1 and files.export_language_codes:  # docs/huggingface.md says where they part
        return "beam>1 of an NLLB-200/M2M-100/mBART-50 model (CTranslate2's beam search keeps its own rules)"
    if files.export_error is not None:
        raise files.export_error
    return files.export_unfit


def _why_other_lines(job: DecodingJob) -> str | None:
    """Why CTranslate2 would write other lines (or scores) than PyTorch for this request, if it would."""
    settings, precision = job.settings, job.options.precision
    if settings.sampling:
        return "sampling=true (CTranslate2 draws other samples from the same seed)"
    if settings.nbest > 1:
        return "nbest>1 (n-best lists decode on PyTorch)"
    if (
        settings.prefix and settings.beam > 1
    ):  # seen in tests/test_translation_api.py: other lines, not only other scores
        return "prefix=true with beam>1 (CTranslate2 ranks hypotheses that extend a prefix differently)"
    if precision not in ("auto", "fp32"):
        return f"precision={precision} (the export is fp32)"
    return None
