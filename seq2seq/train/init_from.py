"""init_from=: a new run's weights taken from a trained model (fine-tuning). Weights only: the
optimiser, the schedule and the data start fresh. What it names: a run directory (its model), a
training checkpoint, a weights-only export (model.safetensors or its directory), or a Hugging Face
model: Marian, M2M-100, NLLB-200 (whose architecture and tokenizers the plan has already taken). The
run's plan reads what it names once (`read_initial_weights`), as it reads a resumed run's checkpoint;
the Trainer's model is loaded from what it read."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import ModelPayload, Vocabulary
from seq2seq.artifacts.huggingface import read_pretrained_directory
from seq2seq.artifacts.marian import TRAINING_ONLY_KEYS
from seq2seq.artifacts.model_files import read_model_file
from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.artifacts.run_dir import CHECKPOINTS_DIR, RunDir
from seq2seq.artifacts.vocab_rows import kept_rows
from seq2seq.config import UserError
from seq2seq.data.vocab_pruning import pruned_record

log = logging.getLogger(__name__)


class InitialWeights:
    """What init_from= names, read once by the run's plan (seq2seq.train.plan), before the corpus is
    tokenized: a file that cannot be read costs the user no minutes of preparation first. The weights
    are handed to the run's model once (`take`): after that the plan holds none of them, so a
    pretrained model is not kept in memory twice for the whole run."""

    def __init__(self, given: str, payload: ModelPayload, full_tokenizers: Any = None) -> None:
        self.given = given  # init_from= as the user wrote it: what messages name
        self.payload: ModelPayload | None = payload  # checkpoint-shaped: model config, vocabulary, weights
        self.full_tokenizers = full_tokenizers  # a Hugging Face model's own (their rows number its embeddings)
        # Kept past `take`: the architecture check still reads them once the weights are handed over.
        self._model_config = payload["config"]["model"]
        self._huggingface = full_tokenizers is not None

    def take(self) -> tuple[ModelPayload, Any]:
        """(the payload, a Hugging Face model's own tokenizers or None), for the one model they
        initialise; the plan forgets both."""
        payload, full, self.payload, self.full_tokenizers = self.payload, self.full_tokenizers, None, None
        if payload is None:
            raise RuntimeError(f"init_from={self.given}: its weights were handed over already")
        return payload, full

    def model_config(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Its model.*, as a run of model.* `settings` would train it: a Hugging Face model's dropouts
        are the run's (the plan took the rest of its architecture)."""
        theirs = self._model_config
        if not self._huggingface:
            return theirs
        return {**theirs, **{key: settings[key] for key in TRAINING_ONLY_KEYS}}

    def check_fits(self, settings: dict[str, Any]) -> None:
        """One line naming each model.* key where its model and a run of `settings` differ."""
        if differences := model_differences(self.model_config(settings), settings):
            raise UserError(
                f"init_from={self.given}: its model config differs from model.* of this run: {'; '.join(differences)}"
            )


def read_initial_weights(init_from: str, pretrained: Path | None) -> InitialWeights:
    """The weights init_from= names: those of the Hugging Face model in `pretrained` (its local
    directory: the plan has it already), else of the file `weights_file_of` finds."""
    if pretrained is not None:
        payload, full = read_pretrained_directory(pretrained)
        return InitialWeights(init_from, payload, full)
    _, payload = read_model_file(weights_file_of(init_from))
    return InitialWeights(init_from, payload)


def init_weights_from(
    model: torch.nn.Module,
    weights: InitialWeights,
    settings: dict[str, Any],
    vocab: Vocabulary,
    tokenizers: Any = None,
) -> None:
    """Loads `weights` into `model`, built from model.* `settings` (a plain dict) for a tokenizer of
    `vocab`; refused in one line when their architecture or vocabulary sizes differ.
    `tokenizers`: the run's; where they are a pruned vocabulary (data.prune_vocab), a Hugging Face
    model's rows are cut to theirs."""
    weights.check_fits(settings)
    path, (payload, full) = weights.given, weights.take()
    if full is not None and tokenizers is not None and pruned_record(tokenizers) is not None:
        payload = kept_rows(payload, full, tokenizers)
    theirs = payload["vocab"]
    if (theirs["src_size"], theirs["tgt_size"]) != (vocab["src_size"], vocab["tgt_size"]):
        raise UserError(
            f"init_from={path}: its vocabularies have {theirs['src_size']}/{theirs['tgt_size']} entries, this "
            f"run's tokenizer {vocab['src_size']}/{vocab['tgt_size']}: its embeddings cannot be used"
        )
    if theirs.get("tokenizer") not in (None, vocab["tokenizer"]):
        log.warning(
            "init_from=%s was trained with another tokenizer of the same size: its embeddings mean other tokens",
            path,
        )
    model.load_state_dict(payload["model"])


def model_differences(theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Each model.* key whose value differs, with both values (a key one side lacks shows as unset)."""
    unset = "unset"
    return [
        f"model.{key}: {theirs.get(key, unset)} in init_from, {ours.get(key, unset)} here"
        for key in sorted(theirs.keys() | ours.keys())
        if theirs.get(key, unset) != ours.get(key, unset)
    ]


def weights_file_of(init_from: str) -> Path:
    """What init_from= names, as a file: a run directory means its model (what translation loads
    from it); a directory with no model in it is one line, not "no such checkpoint file"."""
    path = Path(init_from)
    if path_kind(path) is not PathKind.RUN:
        return path
    try:
        return RunDir(path).model_file()
    except UserError:
        raise UserError(
            f"init_from={init_from}: a directory with no model in it (give a run directory with {CHECKPOINTS_DIR}/, "
            "a checkpoint .pt, a model.safetensors or its directory, or a Marian model's directory)"
        ) from None
