"""Attention (paper §3.2): scaled dot-product attention, and multi-head attention in which each head
attends with its own chunk of the Q/K/V projections.

Where and in what precision the computation runs (a fused kernel, fp32 on a CPU, a sentence's beams
answered together) is decided in `seq2seq.model.kernels`; the key/value cache of incremental
decoding is `seq2seq.model.kv_cache.KVCache`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.model import kernels
from seq2seq.model.kv_cache import KVCache


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V (paper eq. 1), returning the weights too. q: (B, H, Tq, D),
    k and v: (B, H, Tk, D); `mask` is boolean, broadcastable to (B, H, Tq, Tk), True where attending is
    allowed; `causal` hides later keys, aligned bottom-right (the last query sees every key)."""
    # Softmax in fp32 even for a half-precision model: its sum over many keys is where bf16 loses.
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if causal:
        tq, tk = scores.shape[-2:]
        future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
        scores = scores.masked_fill(future, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1).to(v.dtype)
    return F.dropout(weights, dropout, training=dropout > 0) @ v, weights


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def split_projection(x: torch.Tensor, parts: int, heads: int) -> tuple[torch.Tensor, ...]:
    """(B, T, parts*H*D), e.g. a fused Q/K/V projection -> `parts` tensors of (B, H, T, D), with the
    strides chunks of it would have: one view and one unbind for all parts, fewer operator calls for a
    GPU's host to dispatch than a chunk and a view per part (docs/performance.md). Unbound before the
    transpose, so that the backward stacks the parts' gradients where the view wants them (a permute
    of all parts at once costs a copy there)."""
    batch, length, width = x.shape
    parted = x.view(batch, length, parts, heads, width // (parts * heads)).unbind(2)
    return tuple(part.transpose(1, 2) for part in parted)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, H*D)."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


class MultiHeadAttention(nn.Module):
    """Self-attention (one fused Q/K/V projection) or cross-attention (Q from the decoder, K/V from
    the encoder memory)."""

    def __init__(self, d_model: int, heads: int, dropout: float, cross: bool) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.cross = cross
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, d_model) queries; memory: (B, S, d_model) for cross-attention;
        mask: bool, broadcastable to (B, H, T, S), True = may attend; causal: hide later positions.
        With a cache, x holds only the new positions and earlier keys/values come from the cache.
        Returns (B, T, d_model) and, if `need_weights`, the weights (B, H, T, S)."""
        q, k, v = self._project(x, memory) if cache is None else self._project_step(x, memory, cache)
        dropout = self.dropout if self.training else 0.0
        context, weights = kernels.attend(q, k, v, mask, causal, dropout, need_weights, exact=attention)
        if cache is not None:  # back from the decoding precision (kernels.decoding_precision)
            context = context.to(x.dtype)
        return self.out_proj(merge_heads(context)), weights

    def _project(self, x: torch.Tensor, memory: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries from x, keys and values from x (self-attention) or the memory: (B, H, T, D) each."""
        if self.cross:
            q = split_heads(self.q_proj(x), self.heads)
            k, v = split_projection(self.kv_proj(memory), 2, self.heads)
            return q, k, v
        q, k, v = split_projection(self.qkv_proj(x), 3, self.heads)
        return q, k, v

    def _project_step(
        self, x: torch.Tensor, memory: torch.Tensor | None, cache: KVCache
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One decoding step, in the decoding precision: self-attention appends the new positions'
        keys and values to the cache; cross-attention projects the memory at the first step and
        reads the cache after (the memory does not change while decoding)."""
        if self.cross and not cache.empty:
            (q,) = kernels.decoding_precision(x, split_heads(self.q_proj(x), self.heads))
            return q, cache.k, cache.v
        q, k, v = kernels.decoding_precision(x, *self._project(x, memory))
        k, v = cache.append(k, v)
        return q, k, v
