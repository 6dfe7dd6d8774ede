"""Multi-head attention (paper §3.2): each head attends with its own chunk of the Q/K/V projections.

The fast path is `F.scaled_dot_product_attention`; when the caller asks for the attention weights
(dashboards, `translate attention=DIR`), the same arithmetic is done step by step so that the
softmax can be returned.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.device import half_precision_on_cpu

# Per-layer key/value cache for incremental decoding: {"k": (B, H, T, D), "v": (B, H, T, D)}.
KVCache = dict[str, torch.Tensor]


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, T, H*D) -> (B, H, T, D)."""
    batch, length, width = x.shape
    return x.view(batch, length, heads, width // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, D) -> (B, T, H*D)."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def attention_with_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + mask) V, returning the weights too. Shapes as in SDPA;
    `mask` is boolean, True where attending is allowed."""
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


def group_queries(q: torch.Tensor, batch: int) -> torch.Tensor:
    """(B*g, H, T, D) queries whose consecutive groups of g rows share keys -> (B, H, g*T, D)."""
    rows, heads, length, dim = q.shape
    group = rows // batch
    return q.view(batch, group, heads, length, dim).transpose(1, 2).reshape(batch, heads, group * length, dim)


def ungroup(x: torch.Tensor, group: int) -> torch.Tensor:
    """Inverse of `group_queries` for its outputs: (B, H, g*T, X) -> (B*g, H, T, X)."""
    batch, heads, length, width = x.shape
    x = x.view(batch, heads, group, length // group, width).transpose(1, 2)
    return x.reshape(batch * group, heads, length // group, width)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float, causal: bool
) -> torch.Tensor:
    """F.scaled_dot_product_attention, except that on a CPU half-precision inputs run in fp32:
    measured on the small model, PyTorch's CPU flash-attention backward in bf16 was 13x slower than
    in fp32 (it was 40% of a bf16 training step), while the casts cost little."""
    if half_precision_on_cpu(q) and torch.is_grad_enabled():
        with torch.autocast("cpu", enabled=False):  # autocast would cast the inputs back down
            out = F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout, is_causal=causal
            )
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)


class MultiHeadAttention(nn.Module):
    """Self-attention (one fused Q/K/V projection) or cross-attention (Q from the decoder,
    K/V from the encoder memory, computed once per sentence and cached)."""

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

    def _project(
        self, x: torch.Tensor, memory: torch.Tensor | None, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # A half-precision model decoding on a CPU keeps its cache and does its attention in fp32:
        # PyTorch's CPU batched matmuls of a decoding step took 1.8x longer in bf16 than in fp32.
        upcast = cache is not None and half_precision_on_cpu(x)
        if self.cross:
            q = split_heads(self.q_proj(x), self.heads)
            q = q.float() if upcast else q
            if cache is not None and "k" in cache:  # memory does not change while decoding
                return q, cache["k"], cache["v"]
            k, v = (split_heads(t, self.heads) for t in self.kv_proj(memory).chunk(2, dim=-1))
        else:
            q, k, v = (split_heads(t, self.heads) for t in self.qkv_proj(x).chunk(3, dim=-1))
            if upcast:
                q, k, v = q.float(), k.float(), v.float()
            if cache is not None and "k" in cache:  # append this step to the decoded prefix
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
        if cache is not None:
            k, v = (k.float(), v.float()) if upcast else (k, v)
            cache["k"], cache["v"] = k, v
        return q, k, v

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
        With a cache, x holds only the new positions and earlier keys/values come from the cache."""
        q, k, v = self._project(x, memory, cache)  # (B, H, T, D), (B, H, S, D)
        group = q.size(0) // k.size(0)  # beam search: a sentence's hypotheses share its memory
        if group > 1:
            q = group_queries(q, k.size(0))
        # A single new query attends to every cached position: the causal mask is then a no-op.
        causal = causal and q.size(2) > 1
        if causal and q.size(2) != k.size(2):
            # Several new queries after a cached prefix: SDPA's is_causal aligns top-left, we need
            # bottom-right, so spell the mask out.
            tq, tk = q.size(2), k.size(2)
            allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
            mask, causal = allowed if mask is None else mask & allowed, False
        dropout = self.dropout if self.training else 0.0
        # Decoding steps have a handful of queries; there PyTorch's CPU flash-attention kernel took
        # 1.2-1.7x the time of two matmuls and a softmax (measured at 320 rows x 4 heads x 10-30 keys).
        few_queries = q.device.type == "cpu" and q.size(2) <= 16 and not torch.is_grad_enabled()
        if need_weights or few_queries:
            context, weights = attention_with_weights(q, k, v, mask, causal, dropout)
        else:
            context, weights = _sdpa(q, k, v, mask, dropout, causal), None
        if group > 1:
            context = ungroup(context, group)
            weights = ungroup(weights, group) if weights is not None else None
        if cache is not None:  # back from the fp32 cache of a half-precision model (see _project)
            context = context.to(x.dtype)
        return self.out_proj(merge_heads(context)), weights if need_weights else None
