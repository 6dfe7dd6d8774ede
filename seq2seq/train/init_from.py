"""init_from=: a new run's weights taken from a trained model (fine-tuning). Weights only: the
optimiser, the schedule and the data start fresh. What it names: a run directory (its model), a
training checkpoint, a weights-only export (model.safetensors or its directory), or a Hugging Face
model: Marian, M2M-100, NLLB-200 (whose architecture and tokenizers the plan has already taken). The
run's plan locates what it names once (`locate_weights`); the Trainer's model is then loaded from there."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import Vocabulary
from seq2seq.artifacts.huggingface import read_pretrained_directory
from seq2seq.artifacts.marian import TRAINING_ONLY_KEYS
from seq2seq.artifacts.model_files import read_model_file
from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.artifacts.run_dir import CHECKPOINTS_DIR, RunDir
from seq2seq.artifacts.vocab_rows import kept_rows
from seq2seq.config import UserError
from seq2seq.data.vocab_pruning import pruned_record

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WeightsSource:
    """What init_from= names, located once by the run's plan (seq2seq.train.plan)."""

    given: str  # init_from= as the user wrote it: what messages name
    path: Path  # a Hugging Face model's local directory, or the model file of a run, checkpoint or export
    huggingface: bool


def locate_weights(init_from: str, pretrained: Path | None) -> WeightsSource:
    """Where the weights init_from= names are: `pretrained`, the local directory of the Hugging Face
    model it names (the plan has it already), else the file `weights_file_of` finds."""
    if pretrained is not None:
        return WeightsSource(init_from, pretrained, True)
    return WeightsSource(init_from, weights_file_of(init_from), False)


def init_weights_from(
    model: torch.nn.Module, source: WeightsSource, settings: dict[str, Any], vocab: Vocabulary, tokenizers: Any = None
) -> None:
    """Loads the weights at `source` into `model`, built from model.* `settings` (a plain dict) for a
    tokenizer of `vocab`; refused in one line when their architecture or vocabulary sizes differ.
    `tokenizers`: the run's; where they are a pruned vocabulary (data.prune_vocab), a Hugging Face
    model's rows are cut to theirs."""
    path = source.given
    if source.huggingface:
        payload, full = read_pretrained_directory(source.path)
        if tokenizers is not None and pruned_record(tokenizers) is not None:
            payload = kept_rows(payload, full, tokenizers)
        payload["config"]["model"].update({k: settings[k] for k in TRAINING_ONLY_KEYS})
    else:
        _, payload = read_model_file(source.path)
    if differences := model_differences(payload["config"]["model"], settings):
        raise UserError(
            f"init_from={path}: its model config differs from model.* of this run: {'; '.join(differences)}"
        )
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
