"""Decoding's defaults and bounds, written once: the schemas of seq2seq-translate, seq2seq-serve and
seq2seq-distill (config.py), `DecodingSettings` (inference/settings.py, whose checks are the rules
every way in shares: the commands, the Python API, the server's requests) and the Python API's
keywords read them here. Imports nothing, so that config.py reads them without torch."""

from __future__ import annotations

BEAM = 5  # 1 is greedy search
NBEST = 1  # hypotheses (or samples) per line
LENGTH_PENALTY = 1.0  # alpha in score / length^alpha
MAX_LEN_A = 1.5  # a line's output: at most a * source tokens + b
MAX_LEN_B = 10
BATCH_SIZE = 128  # sentences decoded together
SAMPLING = False
TEMPERATURE = 1.0
TOP_K = 0  # 0 keeps every token
TOP_P = 1.0
SEED = 0
PRECISION = "auto"  # decoding: fp32 (seq2seq/precision.py, choose_decoding_precision)

# What numpy, CTranslate2 and torch all take as a seed (numpy and CTranslate2: an unsigned 32-bit
# integer): training's seed too.
MAX_SEED = 2**32 - 1
SEED_RANGE = f"[0, 2^{MAX_SEED.bit_length()} - 1]"  # as the help lines write it: [0, 2^32 - 1]

# The search's own version: raised by any change to what given settings decode (e.g. 2: the
# probabilities renormalised after banning pad and <s>, the end forced at the last step). Caches of
# translations (seq2seq-distill's teacher, back-translation) are keyed on it, so that translations an
# older search made are not reused as if this one had made them.
SEARCH_VERSION = 2
