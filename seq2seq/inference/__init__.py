"""Inference: decoding, everything that turns a trained model into translations. Never imports
`seq2seq.train`; the files models travel in are `seq2seq.artifacts`'.

job.py (the decoding job: the resolved model, DecodingSettings, EngineOptions, the engine asked for;
`decoding_job(cfg)`, where a config becomes one), loading.py (`load`, the one way in: a job ->
an engine), resolved_model.py (what run= and checkpoint= name, read from the disk once),
choice.py (which engine seq2seq-translate picks, and whether a run's CTranslate2 export can
decode a request, on that description), translator.py (PyTorch's engine, the Translator of the Python
API: lines in, translations out) with torch_model.py (its model + tokenizer), translator_api.py (what both
engines return and share), settings.py (DecodingSettings: what may change per call,
`engine.decoding_with(settings)`; EngineOptions: device, threads, precision), search.py (greedy, beam
and sampled decoding, forced prefixes) with speedups.py (its exact CPU shortcuts), sampling.py
(temperature, top-k, top-p), ensemble.py (several checkpoints decoded as one model),
ctranslate2_engine.py (the same API on a CTranslate2 export, without torch) with int8_probe.py
(int8 timed against fp32), command.py (`seq2seq-translate`'s work on its plan: files, chunks,
scoring), attention_plots.py (heatmaps).
"""

from typing import Any

__all__ = ["CTranslate2Translator", "SamplingRule", "Translation", "Translator", "load"]


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use: importing a module of this package (e.g. the
    CTranslate2 path of seq2seq-translate) must not import torch, which takes seconds. The engines'
    modules prepare the process as the commands do (seq2seq/startup.py) before torch or ctranslate2
    load, however they are reached."""
    if name not in __all__:  # a probe (hasattr, introspection) loads nothing
        raise AttributeError(f"module 'seq2seq.inference' has no attribute {name!r}")
    if name == "load":  # the one way in: engine=auto picks CTranslate2 or PyTorch as the commands do
        from seq2seq.inference.loading import load

        return load
    if name == "SamplingRule":
        from seq2seq.inference.sampling import SamplingRule

        return SamplingRule
    if name == "CTranslate2Translator":  # no torch: CTranslate2 and the tokenizers only
        from seq2seq.inference.ctranslate2_engine import CTranslate2Translator

        return CTranslate2Translator
    from seq2seq.inference import translator  # Translation, Translator

    return getattr(translator, name)
