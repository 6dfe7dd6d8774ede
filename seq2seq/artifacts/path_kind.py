"""What a path given to translation, serving or init_from names, told by the files in it: the one
place that decides it. Reads names and at most one small JSON file, never torch (the CTranslate2
path of `seq2seq-translate` decides before torch would load).

No tool here writes two kinds into one directory (`seq2seq-export` refuses an existing one); for a
directory that holds more than one anyway, the first kind in PathKind's order wins.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

WEIGHTS_FILE = "model.safetensors"  # `seq2seq-export format=safetensors`: the weights, WEIGHTS_CONFIG beside them
# The JSON beside a weights export, and the format it names (which tells it from a Hugging Face config.json).
WEIGHTS_CONFIG, WEIGHTS_FORMAT = "config.json", "seq2seq-weights-1"
CTRANSLATE2_FILE = "model.bin"  # `seq2seq-export format=ctranslate2` (and CTranslate2's converters) write it
DECODING_FILE = "seq2seq.json"  # in our CTranslate2 export, beside model.bin: max_positions and its checkpoint
HUGGINGFACE_CONFIG = "config.json"  # transformers' model config: it has a model_type (ours has a "format")


class PathKind(enum.Enum):
    CTRANSLATE2 = "a CTranslate2 model"  # a directory with model.bin
    HUGGINGFACE = "a Hugging Face model"  # a directory whose config.json has a model_type (a Marian model)
    WEIGHTS = "a seq2seq weights export"  # a directory with model.safetensors, or a .safetensors file
    RUN = "a run directory"  # any other directory: what training writes (checkpoints/, model/, ctranslate2/)
    CHECKPOINT = "a training checkpoint"  # any other path, existing or not: a .pt file


def path_kind(path: str | Path) -> PathKind:
    path = Path(path)
    if path.is_dir():
        if (path / CTRANSLATE2_FILE).is_file():
            return PathKind.CTRANSLATE2
        if _has_model_type(path / HUGGINGFACE_CONFIG):
            return PathKind.HUGGINGFACE
        if (path / WEIGHTS_FILE).is_file():
            return PathKind.WEIGHTS
        return PathKind.RUN
    return PathKind.WEIGHTS if path.suffix == ".safetensors" else PathKind.CHECKPOINT


def _has_model_type(config: Path) -> bool:
    try:
        stored = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(stored, dict) and "model_type" in stored
