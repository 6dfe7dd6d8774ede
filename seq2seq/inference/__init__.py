"""Inference: everything that turns a trained model into translations. Never imports `seq2seq.train`.

loading.py (a checkpoint or exported weights -> model + tokenizer), translator.py (the Translator:
lines in, translations out), search.py (greedy and beam search) with speedups.py (its exact CPU
shortcuts), command.py (`seq2seq-translate`'s work: files, chunks, scoring), attention_plots.py
(heatmaps), export.py (`seq2seq-export`).
"""
