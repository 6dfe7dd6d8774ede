"""A model's files read as one: a training checkpoint, a weights export (see safetensors.py) or a Hugging
Face Marian directory (marian.py) as a checkpoint-shaped payload, and the tokenizer that belongs to it.
What decoding (seq2seq.inference.torch_model), seq2seq-export, averaging and init_from= read a model with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seq2seq.artifacts.checkpoint import (
    ModelPayload,
    _check_vocab_entries,
    _check_weights,
    model_config_of,
    read_checkpoint_file,
)
from seq2seq.artifacts.path_kind import HUGGINGFACE_CONFIG, WEIGHTS_FILE, PathKind, argos_package_error, path_kind
from seq2seq.artifacts.safetensors import load_weights
from seq2seq.config import UserError
from seq2seq.data.sentencepiece import SOURCE_SPM, TARGET_SPM, TARGET_VOCAB, VOCAB
from seq2seq.data.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE, Tokenizers

# What reads the models PyTorch does not: said instead of "not a checkpoint".
OTHER_READERS = {
    PathKind.CTRANSLATE2: "CTranslate2Translator.load or seq2seq-translate (engine=auto) decodes it",
}


def read_model_file(path: Path) -> tuple[Path, ModelPayload]:
    """(the file read, its checkpoint-shaped payload) of any model PyTorch builds: a training checkpoint,
    a weights-only model.safetensors (given as the file or as its directory) or a Hugging Face Marian
    directory (read as init_from= reads it; its tokenizer files are beside config.json). What the path
    is, is looked at once (path_kind); a model only other readers read is refused, naming them."""
    kind = path_kind(path)
    if kind in OTHER_READERS:
        raise UserError(f"{path}: {kind.value}, not one PyTorch translation reads; {OTHER_READERS[kind]}")
    if kind is PathKind.ARGOS:
        raise argos_package_error(path)
    if kind is PathKind.HUGGINGFACE:
        from seq2seq.artifacts.huggingface import load_pretrained  # here: it imports transformers' side

        return path / HUGGINGFACE_CONFIG, load_pretrained(str(path))[0]
    if kind is PathKind.WEIGHTS:
        path = path / WEIGHTS_FILE if path.is_dir() else path
        return path, load_weights(path)
    if kind is PathKind.RUN:  # a directory, but no model's: "no such checkpoint file" said it was not there
        raise UserError(f"{path}: a directory, not a model file: give a run directory as run=, or a checkpoint in it")
    payload = read_checkpoint_file(path)
    config = payload.get("config")
    model_cfg = model_config_of(config.get("model") if isinstance(config, dict) else None, path)
    vocab = payload.get("vocab")
    _check_vocab_entries(vocab if isinstance(vocab, dict) else {}, path)
    _check_weights(payload["model"], model_cfg, vocab, path)
    return path, payload


def check_same_tokenizer(
    tokenizers: Tokenizers, first: Tokenizers, path: Path, first_path: Path, what: str = "an ensemble"
) -> None:
    """An ensemble reads and writes one vocabulary, and an average of weights is only meaningful where
    each id is the same token: every checkpoint's tokenizer must be the first's."""
    same = tokenizers.src.to_str() == first.src.to_str() and tokenizers.tgt.to_str() == first.tgt.to_str()
    if not same:
        raise UserError(
            f"{path}: its tokenizer differs from that of {first_path}; {what} needs checkpoints that "
            "share one tokenizer (checkpoints of one run)"
        )


def load_tokenizers(checkpoint: Path, run: str | None, data: dict[str, Any] | None = None) -> Tokenizers:
    """The tokenizer lives in the run directory; a checkpoint copied elsewhere may carry it beside itself.
    `data`: the model's data config (its payload's config["data"]), whose tokenizer keys say which files
    a missing tokenizer is (a SentencePiece run's are not tokenizer.json)."""
    candidates = [checkpoint.parent, checkpoint.parent.parent] + ([Path(run)] if run else [])
    for directory in candidates:
        try:
            return Tokenizers.load(directory)
        except FileNotFoundError:
            continue
    raise UserError(
        f"{checkpoint}: its tokenizer is not beside it or in its run directory: {_tokenizer_files(data)}; "
        "copy them from the run that trained it"
    )


def _tokenizer_files(data: dict[str, Any] | None) -> str:
    """The files a model's tokenizer is saved as, by what its run recorded (data.tokenizer, data.joint_vocab)."""
    if not isinstance(data, dict) or "tokenizer" not in data:  # a model that does not say: either kind
        return f"{JOINT_FILE} (or {SOURCE_SPM}, {TARGET_SPM} and {VOCAB})"
    joint = data.get("joint_vocab", True)
    if data["tokenizer"] == "sentencepiece":
        names = [SOURCE_SPM, TARGET_SPM, VOCAB] + ([] if joint else [TARGET_VOCAB])
        return f"{', '.join(names[:-1])} and {names[-1]} (data.tokenizer=sentencepiece)"
    names = [JOINT_FILE] if joint else [SRC_FILE, TGT_FILE]
    return f"{' and '.join(names)} (data.tokenizer={data['tokenizer']})"
