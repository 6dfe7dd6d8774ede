"""Inference: everything that turns a trained model into translations. Never imports `seq2seq.train`.

loading.py (a checkpoint or exported weights -> model + tokenizer), translator.py (the Translator,
the Python API: lines in, translations out), search.py (greedy, beam and sampled decoding, forced
prefixes) with speedups.py (its exact CPU shortcuts), sampling.py (temperature, top-k, top-p),
ensemble.py (several checkpoints decoded as one model), command.py (`seq2seq-translate`'s work: files, chunks, scoring), attention_plots.py
(heatmaps), export.py (`seq2seq-export`).
"""

from typing import Any

__all__ = ["SamplingRule", "Translation", "Translator"]


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use: importing a module of this package (e.g. the
    CTranslate2 path of seq2seq-translate) must not import torch, which takes seconds."""
    if name == "SamplingRule":
        from seq2seq.inference.sampling import SamplingRule

        return SamplingRule
    if name in ("Translation", "Translator"):
        from seq2seq.inference import translator

        return getattr(translator, name)
    raise AttributeError(f"module 'seq2seq.inference' has no attribute {name!r}")
