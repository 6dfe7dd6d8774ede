"""What a path given to translation, serving or init_from names, told by the files in it: the one
place that decides it. Reads names, at most one small JSON file and a zip's directory (an Argos
package under another name), never torch (the CTranslate2 path of `seq2seq-translate` decides before
torch would load).

No tool here writes two kinds into one directory (`seq2seq-export` refuses an existing one); for a
directory that holds more than one anyway, the first kind in PathKind's order wins.
"""

from __future__ import annotations

import enum
import json
import shlex
import zipfile
from pathlib import Path

from seq2seq.config import UserError

WEIGHTS_FILE = "model.safetensors"  # `seq2seq-export format=safetensors`: the weights, WEIGHTS_CONFIG beside them
# The JSON beside a weights export, and the format it names (which tells it from a Hugging Face config.json).
WEIGHTS_CONFIG, WEIGHTS_FORMAT = "config.json", "seq2seq-weights-1"
CTRANSLATE2_FILE = "model.bin"  # `seq2seq-export format=ctranslate2` (and CTranslate2's converters) write it
DECODING_FILE = "seq2seq.json"  # in our CTranslate2 export, beside model.bin: max_positions and its checkpoint
HUGGINGFACE_CONFIG = "config.json"  # transformers' model config: it has a model_type (ours has a "format")
ARGOS_SUFFIX, ARGOS_METADATA, ARGOS_SPM = ".argosmodel", "metadata.json", "sentencepiece.model"  # artifacts/argos.py


class PathKind(enum.Enum):
    # A .argosmodel (a zip of one folder: metadata.json, sentencepiece.model, model/), that folder
    # unzipped, or its model/: read by Argos Translate, not by seq2seq (argos_package_error says why).
    ARGOS = "an Argos Translate package"
    CTRANSLATE2 = "a CTranslate2 model"  # a directory with model.bin
    HUGGINGFACE = "a Hugging Face model"  # a directory whose config.json has a model_type (a Marian model)
    WEIGHTS = "a seq2seq weights export"  # a directory with model.safetensors, or a .safetensors file
    RUN = "a run directory"  # any other directory: what training writes (checkpoints/, model/, ctranslate2/)
    CHECKPOINT = "a training checkpoint"  # any other path, existing or not: a .pt file


def path_kind(path: str | Path) -> PathKind:
    path = Path(path)
    if path.is_dir():
        if _is_argos_folder(path) or ((path / CTRANSLATE2_FILE).is_file() and _is_argos_folder(path.parent)):
            return PathKind.ARGOS
        if (path / CTRANSLATE2_FILE).is_file():
            return PathKind.CTRANSLATE2
        if _has_model_type(path / HUGGINGFACE_CONFIG):
            return PathKind.HUGGINGFACE
        if (path / WEIGHTS_FILE).is_file():
            return PathKind.WEIGHTS
        return PathKind.RUN
    if path.suffix == ".safetensors":
        return PathKind.WEIGHTS
    return PathKind.ARGOS if _is_argos_zip(path) else PathKind.CHECKPOINT


def argos_package_error(path: str | Path) -> UserError:
    """What to do with an Argos package given where a model is read: seq2seq cannot decode one (its
    CTranslate2 model has no <pad> and no seq2seq.json beside it; its tokenizer is one sentencepiece.model)."""
    package = str(path) if Path(path).is_file() else "<file>.argosmodel"
    install = f"import argostranslate.package as p; p.install_from_path({json.dumps(package)})"
    return UserError(
        f"{path}: an Argos Translate package, which Argos Translate and "
        "LibreTranslate read, not seq2seq; translate with the run or checkpoint it was exported from "
        f"(seq2seq-translate run=<run dir>), or install it into Argos Translate: python -c {shlex.quote(install)}"
    )


def _is_argos_folder(path: Path) -> bool:
    return (path / ARGOS_METADATA).is_file() and (path / ARGOS_SPM).is_file() and (path / "model").is_dir()


def _is_argos_zip(path: Path) -> bool:
    """A .argosmodel file, or one under another name: a zip of one folder with Argos's files. A checkpoint
    (.pt) is a zip too, of other names; reading a zip's directory reads its end, not its tensors."""
    if not path.is_file():
        return False
    if path.suffix == ARGOS_SUFFIX:
        return True
    if path.suffix == ".pt":
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    tails = {name.partition("/")[2] for name in names}
    return ARGOS_METADATA in tails and f"model/{CTRANSLATE2_FILE}" in tails


def _has_model_type(config: Path) -> bool:
    try:
        stored = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(stored, dict) and "model_type" in stored


def check_named_models_exist(runs: list[str | None], checkpoint: str | None) -> None:
    """Each run directory and checkpoint a command names (`checkpoint=` may list several, comma-separated)
    is there, with the loaders' own one-line errors: the commands check it before torch loads, so a
    path typed wrong is answered at once."""
    for run in runs:
        if run and not Path(str(run)).is_dir():
            raise UserError(f"{Path(str(run))}: no such run directory")
    for part in str(checkpoint or "").split(","):
        if part and not Path(part).exists():
            raise UserError(f"{part}: no such checkpoint file")
