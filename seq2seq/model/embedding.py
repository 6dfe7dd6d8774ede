"""Token embeddings and positional encodings (paper §3.4 and §3.5)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


class TokenEmbedding(nn.Module):
    """Looks up token vectors and scales them by sqrt(d_model), as the paper does, so that
    they are not drowned by the positional encoding added next."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        self.pad_id = pad_id
        self.scale = math.sqrt(d_model) if scale else 1.0  # some Marian models leave it out
        nn.init.normal_(self.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.weight[pad_id].zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and self.weight.requires_grad and torch.is_grad_enabled():
            return LookupGradientMadeLate.apply(tokens, self.weight, self.pad_id) * self.scale
        return nn.functional.embedding(tokens, self.weight, self.pad_id) * self.scale


class LookupGradientMadeLate(torch.autograd.Function):
    """`F.embedding(tokens, weight, padding_idx=pad_id)` for the code torch.compile traces, whose
    backward makes the (vocabulary x d_model) gradient only once the looked-up rows' gradient exists.

    Why: traced, the dense gradient's zeros depend on nothing, and Inductor filled them early, in the
    forward pass, so a table of zeros per look-up (two with shared embeddings) was held through the
    update's peak, above eager's (docs/performance.md, "The embeddings' gradient"). Here the zeros are
    summed with 0 times one of the rows' gradients, a dependency that keeps them after it (one
    element, not the rows' sum: a sum's size is a guard of Inductor's C++ reductions, a recompile at
    4,096 elements). 0 * x is NaN only where x is not finite, and then the update is skipped anyway."""

    @staticmethod
    def forward(ctx: Any, tokens: torch.Tensor, weight: torch.Tensor, pad_id: int) -> torch.Tensor:
        ctx.save_for_backward(tokens)
        ctx.pad_id, ctx.table = pad_id, (weight.shape, weight.dtype)
        return nn.functional.embedding(tokens, weight, pad_id)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, torch.Tensor, None]:
        (tokens,) = ctx.saved_tensors
        shape, dtype = ctx.table
        ids = tokens.reshape(-1)
        rows = grad.reshape(ids.numel(), shape[1]).to(dtype) * (ids != ctx.pad_id).to(dtype)[:, None]
        zeros = torch.zeros(shape, dtype=dtype, device=grad.device) + 0.0 * rows[0, 0]
        return None, zeros.index_add(0, ids, rows), None


def sinusoidal_table(max_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...). Shape (max_positions, d_model).
    layout="split" holds the same values with all sines first and all cosines after (Marian's table);
    layout="fairseq" is M2M-100's and NLLB-200's (`fairseq_table`)."""
    if layout == "fairseq":
        return fairseq_table(max_positions, d_model)
    position = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    half = d_model // 2
    sines, cosines = (
        (slice(0, half), slice(half, d_model)) if layout == "split" else (slice(0, None, 2), slice(1, None, 2))
    )
    table[:, sines] = torch.sin(position * inv_freq)
    table[:, cosines] = torch.cos(position * inv_freq[:half])
    return table


# fairseq numbers a sentence's positions from padding_idx + 1 (pad is id 1 in its dictionary): the first
# token reads row 2 of its table, whose row 1 (pad's) is zero.
FAIRSEQ_POSITION_OFFSET = 2


def fairseq_table(max_positions: int, d_model: int) -> torch.Tensor:
    """fairseq's (tensor2tensor's) sinusoids as M2M-100 and NLLB-200 use them: frequencies
    10000^(-i / (d/2 - 1)), sines then cosines, row p for the token at position p (from 0), which fairseq
    numbers p + FAIRSEQ_POSITION_OFFSET."""
    half = d_model // 2
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    position = torch.arange(FAIRSEQ_POSITION_OFFSET, max_positions + FAIRSEQ_POSITION_OFFSET, dtype=torch.float32)
    angles = position.unsqueeze(1) * inv_freq.unsqueeze(0)  # (max_positions, d/2)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class PositionalEncoding(nn.Module):
    """Adds position information: the fixed sinusoids of the paper, or learned vectors."""

    def __init__(self, max_positions: int, d_model: int, learned: bool, layout: str = "interleaved") -> None:
        super().__init__()
        self.max_positions = max_positions
        if learned:
            self.table = nn.Parameter(torch.randn(max_positions, d_model) * d_model**-0.5)
        else:
            # A buffer, not a parameter: never trained, and not saved (persistent=False): rebuilt from the config.
            self.register_buffer("table", sinusoidal_table(max_positions, d_model, layout), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: (B, T, d_model); offset: positions already decoded (incremental decoding)."""
        length = x.size(1)
        if offset + length > self.max_positions:
            raise ValueError(
                f"sequence of {offset + length} positions exceeds model.max_positions={self.max_positions}"
            )
        return x + self.table[offset : offset + length].to(x.dtype)
