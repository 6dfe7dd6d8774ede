"""Inference: everything that turns a trained model into translations. Never imports `seq2seq.train`.

loading.py (a checkpoint or exported weights -> model + tokenizer), translator.py (the Translator,
the Python API: lines in, translations out), search.py (greedy, beam and sampled decoding, forced
prefixes) with speedups.py (its exact CPU shortcuts), sampling.py (temperature, top-k, top-p),
ensemble.py (several checkpoints decoded as one model), command.py (`seq2seq-translate`'s work: files, chunks, scoring), attention_plots.py
(heatmaps), export.py (`seq2seq-export`).
"""

from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.translator import Translation, Translator

__all__ = ["SamplingRule", "Translation", "Translator"]
