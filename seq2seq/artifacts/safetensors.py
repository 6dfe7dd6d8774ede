"""The weights-only export: <dir>/model.safetensors (the weights, no optimiser state; reading it runs
no code) and config.json beside it (model config, vocabulary sizes, special-token ids, the languages and
tag convention of data.directions, the checkpoint it was made from). Training writes one into <run>/model/; `seq2seq-export format=safetensors` anywhere.
Its writer and its reader, together.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import FORMAT, ModelPayload, _check_vocab_entries, _check_weights, model_config_of
from seq2seq.artifacts.freshness import checkpoint_record
from seq2seq.artifacts.path_kind import WEIGHTS_CONFIG, WEIGHTS_FILE, WEIGHTS_FORMAT
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.directions import language_record
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def tied_aliases(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(alias, stored name) pairs of the state dict entries that are one tensor under two names,
    in the order they are restored (an alias may point at an earlier alias)."""
    aliases = []
    if model.get("share_embeddings"):
        aliases.append(("tgt_embed.weight", "src_embed.weight"))
    if model.get("tie_output", True):
        aliases.append(("output.weight", "tgt_embed.weight"))
    return aliases


def safetensors_writer(payload: dict[str, Any], model_cfg: ModelConfig, path: Path) -> Callable[[Path], None]:
    """Checks the checkpoint's payload up front; the returned function writes model.safetensors and
    config.json into a directory (`load_weights` reads them back)."""
    from safetensors.torch import save_file

    state = dict(payload["model"])
    model = dataclasses.asdict(model_cfg)
    aliases = tied_aliases(model)
    for alias, stored in aliases:
        if alias not in state or stored not in state or not torch.equal(state[alias], state[stored]):
            raise UserError(f"{path}: {alias} should be the same tensor as {stored} (model config) but is not")
    for alias, _ in aliases:
        del state[alias]
    # safetensors stores each tensor once, contiguous; the checkpoint's are the fp32 master weights.
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}
    config = {
        "format": WEIGHTS_FORMAT,
        "model": model,
        "vocab": {
            **payload["vocab"],
            "pad_id": PAD_ID,
            "bos_id": BOS_ID,
            "eos_id": EOS_ID,
            "unk_id": UNK_ID,
        },
        "tied": [list(pair) for pair in aliases],
        "data": language_record(payload["config"].get("data", {})),  # languages and tags: translation's tgt_lang
        **checkpoint_record(path, payload.get("step", -1)),  # which checkpoint: translation checks it is current
    }

    def write(directory: Path) -> None:
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": WEIGHTS_FORMAT})
        (directory / WEIGHTS_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    return write


def load_weights(path: str | Path) -> ModelPayload:
    """A weights-only export (model.safetensors, with config.json beside it) as a checkpoint-shaped
    dict that `model_from_checkpoint` takes. Reading it runs no code: a JSON file and raw tensors.
    A directory means the model.safetensors in it."""
    path = Path(path)
    path = path / WEIGHTS_FILE if path.is_dir() else path
    if not path.is_file():
        raise UserError(f"{path}: no such weights file")
    config_path = path.parent / WEIGHTS_CONFIG
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise UserError(f"{config_path}: missing; a weights file needs the config.json written beside it") from err
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{config_path}: not a readable config ({err})") from err
    if not isinstance(config, dict) or config.get("format") != WEIGHTS_FORMAT:
        raise UserError(f"{config_path}: not a seq2seq weights config (format {WEIGHTS_FORMAT})")
    model_cfg, vocab = config.get("model"), config.get("vocab")
    if not isinstance(model_cfg, dict) or not isinstance(vocab, dict):
        raise UserError(f"{config_path}: has no model or vocab section")
    checked_model = model_config_of(model_cfg, config_path)
    _check_vocab_entries(vocab, config_path)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(path)
    except (SafetensorError, OSError) as err:
        raise UserError(f"{path}: not a readable safetensors file (truncated or corrupt): {err}") from err
    for alias, stored in config.get("tied", []):  # one tensor under two names, stored once
        if stored in state:
            state[alias] = state[stored]
    _check_weights(state, checked_model, vocab, path)
    languages = {"data": config["data"]} if isinstance(config.get("data"), dict) else {}  # an older export: none
    return ModelPayload(
        format=FORMAT, model=state, config={"model": model_cfg, **languages}, vocab=vocab, step=config.get("step", -1)
    )
