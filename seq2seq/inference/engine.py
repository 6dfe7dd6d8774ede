"""Which engine `seq2seq-translate` decodes with: PyTorch (`Translator`) or CTranslate2
(`CTranslate2Translator`), chosen without importing torch.

engine=auto (the default) decodes a run with its CTranslate2 export, `<run>/ctranslate2/`, which
training writes when ctranslate2 is installed, wherever that gives the lines PyTorch gives, only
faster: the best translation by greedy or beam search, a forced prefix in greedy search, fp32.
Everything else stays on PyTorch: n-best lists (CTranslate2 renormalises the probabilities after
banning <pad> and <s>, so its scores differ), a prefix in beam search (CTranslate2 ranks the
hypotheses that extend it otherwise), sampling (its sampler draws other samples from the same seed),
attention plots, ensembles, bf16/fp16, an export made from another checkpoint than the run's (by the
record inside the export). The log says which engine decodes and why; engine=torch or
engine=ctranslate2 forces one.

On a CPU with bf16 instructions (AMX, AVX512-BF16) PyTorch's precision=auto is bf16 (measured,
seq2seq/precision.py), which is faster than the fp32 export on some of those CPUs and slower on
others: there engine=auto with precision=auto times both once (seq2seq/inference/engine_probe.py,
cached per machine and model) and decodes with the faster, saying so; its lines may then differ from
the other engine's (bf16 against fp32). Elsewhere both decode in fp32 and the export is the faster.
The measurements behind these rules: docs/performance.md.

precision=int8 is CTranslate2's alone (its weights quantised to 8 bits as the export loads): the lines
then differ from fp32 by choice, so n-best, sampling and prefixes decode with it too. It is timed
against fp32 once per machine and model, and a warning says so where it is slower.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq import cpuinfo
from seq2seq.config import UserError
from seq2seq.inference import engine_probe
from seq2seq.inference.ctranslate2_engine import cuda_device_count, export_candidate
from seq2seq.inference.run_export import checked_export, given_export, int8_export, why_not_ctranslate2
from seq2seq.inference.translation import TranslatorAPI, replaced
from seq2seq.run_files import CTRANSLATE2_DIR, DECODING_FILE, find_checkpoint, why_stale

log = logging.getLogger("seq2seq.translate")
EXPORT_REASON = "the run's CTranslate2 export; engine=torch for PyTorch"


@dataclass(frozen=True)
class EngineChoice:
    engine: str  # "torch" or "ctranslate2"
    model: str | None  # the CTranslate2 model directory; None for torch (run= or checkpoint= as given)
    why: str  # for the log
    # CTranslate2 taken as the faster engine, not because the settings need it: where it cannot run
    # (its CUDA libraries missing), PyTorch decodes instead (seq2seq.inference.command).
    preferred_only: bool = False


def choose_engine(cfg: Any) -> EngineChoice:
    """The engine and model that `cfg` (a TranslateConfig) decodes with; a forced engine that cannot
    decode what was asked is a one-line UserError naming the key."""
    if given_export(cfg):  # a CTranslate2 export given by hand
        if cfg.engine == "torch":
            raise UserError(f"config error: engine=torch: checkpoint={cfg.checkpoint} is a CTranslate2 model")
        _warn_if_stale(Path(cfg.checkpoint))
        return EngineChoice("ctranslate2", str(cfg.checkpoint), "checkpoint= is a CTranslate2 model")
    if cfg.precision == "int8":
        if cfg.engine == "torch":
            raise UserError("config error: engine=torch: precision=int8 is CTranslate2's (engine=auto or ctranslate2)")
        return EngineChoice("ctranslate2", int8_export(cfg, probe_loader(cfg)), "precision=int8 is CTranslate2's")
    if cfg.engine == "torch":
        return EngineChoice("torch", None, "engine=torch")
    if cfg.engine == "ctranslate2":
        return EngineChoice("ctranslate2", checked_export(cfg), EXPORT_REASON)
    unfit = why_not_ctranslate2(cfg)
    if unfit is not None:
        return EngineChoice("torch", None, unfit)
    if cfg.precision == "auto" and _bf16_cpu(cfg):
        return _measured(cfg)
    return EngineChoice("ctranslate2", str(Path(cfg.run) / CTRANSLATE2_DIR), EXPORT_REASON, preferred_only=True)


def _measured(cfg: Any) -> EngineChoice:
    """engine=auto, precision=auto on a CPU with bf16 instructions: the faster of PyTorch (in the
    precision its auto picks) and the run's fp32 export, timed on this machine."""
    timing = engine_probe.cached_timing(cfg, ("torch", "ctranslate2"), probe_loader(cfg))
    torch_s, ct2_s = timing.seconds["torch"], timing.seconds["ctranslate2"]
    figures = (
        f"PyTorch {timing.torch_precision} {torch_s:.2f} s, CTranslate2 fp32 {ct2_s:.2f} s "
        f"for the same {engine_probe.PROBE_SENTENCES} sentences, measured on this CPU once"
    )
    if timing.fastest() == "torch":
        return EngineChoice("torch", None, f"faster here: {figures}; engine=ctranslate2 for the export")
    export = str(Path(cfg.run) / CTRANSLATE2_DIR)
    why = f"the run's export, faster here: {figures}; engine=torch for PyTorch"
    return EngineChoice("ctranslate2", export, why, preferred_only=True)


def probe_loader(cfg: Any) -> Callable[[str], TranslatorAPI]:
    """What the engine probe times for a run: "torch" (PyTorch in the precision its auto picks), or
    its CTranslate2 export, "ctranslate2" (fp32) or "int8"."""

    def load(candidate: str) -> TranslatorAPI:
        if candidate != "torch":
            return export_candidate(cfg, candidate)
        from seq2seq.inference.translator import Translator  # torch: only when measuring, never for a cached answer

        return Translator.from_config(replaced(cfg, engine="torch", precision="auto"))

    return load


def _bf16_cpu(cfg: Any) -> bool:
    """Decoding on a CPU with bf16 instructions: device=cpu, or auto on a machine without a GPU (as
    CTranslate2 counts them: torch is not imported to choose)."""
    device = str(cfg.device)
    on_cpu = device == "cpu" or (device == "auto" and not cuda_device_count())
    return on_cpu and cpuinfo.has_bf16()


def _warn_if_stale(export: Path) -> None:
    """<run>/ctranslate2 given by hand: say so if the run has a newer checkpoint than the export."""
    run = export.parent
    if not (run / "checkpoints").is_dir():
        return  # an export kept somewhere else: nothing to compare it with
    with contextlib.suppress(UserError):
        if stale := why_stale(export / DECODING_FILE, find_checkpoint(run)):
            log.warning("%s: it decodes that model", stale)
