"""The weights of a pruned vocabulary (data.prune_vocab, seq2seq.data.vocab_pruning): the kept rows of
the pretrained model's embedding (and output layer, and mBART's final_logits_bias) at init_from=, and at
the Hugging Face export the model's whole vocabulary again, so that transformers loads it unchanged.

The export puts each kept row back at its id and takes the rows not kept from the model the run was
pruned from (the directory its tokenizer records); `generate` must still write the run's lines, so the
generation config suppresses the ids not kept and renormalises what is left (`renormalize_logits`:
transformers applies its processors to log-probabilities, so without it a beam's scores would count the
dropped ids' probability). The run's own search renormalises too (seq2seq.inference.search: `renormalise`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from seq2seq.config import UserError
from seq2seq.data.fairseq_vocab import FairseqTokenizers

# Our state dict's tensors with a row per vocabulary id (the embeddings, the output layer, its bias).
VOCAB_ROWS = ("src_embed.weight", "tgt_embed.weight", "output.weight", "output_bias")


def rows_in(full: FairseqTokenizers, pruned: FairseqTokenizers) -> torch.Tensor:
    """For each of `pruned`'s ids, the id of the same token in `full` (the model's whole vocabulary,
    in our numbering)."""
    ours = {model_id: our_id for our_id, model_id in enumerate(full.src.order)}
    return torch.tensor([ours[model_id] for model_id in pruned.src.order], dtype=torch.long)


def kept_rows(payload: dict[str, Any], full: FairseqTokenizers, pruned: FairseqTokenizers) -> dict[str, Any]:
    """The pretrained model's payload (`full`'s numbering) with only the rows `pruned` keeps, in its order."""
    rows = rows_in(full, pruned)
    state = dict(payload["model"])
    for name in VOCAB_ROWS:
        if name in state:
            state[name] = state[name][rows].clone()
    size = len(rows)
    return {**payload, "model": state, "vocab": {**payload["vocab"], "src_size": size, "tgt_size": size}}


def all_rows(
    payload: dict[str, Any], pruned: FairseqTokenizers, path: Path, read: Callable[[Path], dict[str, Any]]
) -> tuple[dict[str, Any], FairseqTokenizers]:
    """A pruned run's payload (of the checkpoint at `path`) over the model's whole vocabulary, and the
    tokenizers that number it: each kept row at its id, the others the model's own, which `read` gives
    (a payload) from the directory the run was pruned from; refused in one line when that model is
    gone or another."""
    source = Path(pruned.src.pruned["from"])
    if not source.is_dir():
        raise UserError(
            f"{path}: its vocabulary was pruned (data.prune_vocab) from {source}, which is not there: the Hugging "
            "Face export takes the rows the run dropped from that model; put it back, or export format=ctranslate2"
        )
    base = read(source)
    full = pruned.with_pruning(None)
    rows = rows_in(full, pruned)
    state = dict(payload["model"])
    for name in VOCAB_ROWS:
        if name not in state:
            continue
        mine, theirs = state[name], base["model"].get(name)
        if theirs is None or theirs.shape[0] != len(full.src.order) or theirs.shape[1:] != mine.shape[1:]:
            raise UserError(
                f"{path}: {source} is not the model its vocabulary was pruned from ({name}: "
                f"{None if theirs is None else tuple(theirs.shape)}, the run's {tuple(mine.shape)})"
            )
        whole = theirs.detach().clone().to(mine.dtype)
        whole[rows] = mine.detach()
        state[name] = whole
    size = len(full.src.order)
    return {**payload, "model": state, "vocab": {**payload["vocab"], "src_size": size, "tgt_size": size}}, full


def suppress_dropped(generation_config: Any, pruned: FairseqTokenizers) -> None:
    """`generate` as the run decodes: the model's ids not kept suppressed, the rest renormalised."""
    kept = set(pruned.src.order)
    generation_config.suppress_tokens = [i for i in range(pruned.src.pruned["rows"]) if i not in kept]
    generation_config.renormalize_logits = True
