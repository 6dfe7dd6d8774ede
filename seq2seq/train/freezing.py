"""freeze= and trainable_top_layers=: the parts of a model that a run leaves as they came (fine-tuning a
large pretrained model on little data, or in less memory: a frozen parameter has no gradient and no
optimiser state, seq2seq.train.flat_parameters). Frozen by name, before the optimiser sees the model."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from seq2seq.config import freezes_embeddings

log = logging.getLogger(__name__)


def frozen_names(model: torch.nn.Module, parts: Sequence[str], top_layers: int | None) -> list[str]:
    """The parameters `parts` (embeddings | encoder | decoder) and `top_layers` (all but the top N
    layers of each stack, and the embeddings) name. A tied output layer is the embedding itself."""
    encoder_layers, decoder_layers = len(model.encoder_layers), len(model.decoder_layers)

    def frozen(name: str) -> bool:
        stack, _, rest = name.partition(".")
        embedding = ("src_positions", "tgt_positions", "src_embed_norm", "tgt_embed_norm", "output.")
        if name.endswith("_embed.weight") or name.startswith(embedding):
            return freezes_embeddings(parts, top_layers)
        if stack in ("encoder_layers", "encoder_norm"):
            if "encoder" in parts:
                return True
            return (
                top_layers is not None
                and stack == "encoder_layers"
                and int(rest.split(".")[0]) < encoder_layers - top_layers
            )
        if stack in ("decoder_layers", "decoder_norm"):
            if "decoder" in parts:
                return True
            return (
                top_layers is not None
                and stack == "decoder_layers"
                and int(rest.split(".")[0]) < decoder_layers - top_layers
            )
        return False

    return [name for name, _ in model.named_parameters() if frozen(name)]


def freeze(model: torch.nn.Module, parts: Sequence[str], top_layers: int | None) -> None:
    names = set(frozen_names(model, parts, top_layers))
    if not names:
        return
    count = 0
    for name, param in model.named_parameters():
        if name in names:
            param.requires_grad_(False)
            count += param.numel()
    total = sum(p.numel() for p in model.parameters())
    log.info(
        "frozen: %s of %s parameters (%s)",
        f"{count:,}",
        f"{total:,}",
        ", ".join(sorted({n.split(".")[0] for n in names})),
    )
