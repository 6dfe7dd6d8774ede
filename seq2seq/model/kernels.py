"""How attention runs on this hardware: the precision and kernel choices, each with its measured reason.

The model states attention as the paper does (`seq2seq.model.attention.attention`); this module only
decides where and in what precision that computation runs. Every choice gives the same result up to
float rounding; the tests compare the paths with each other and with torch's own attention.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from seq2seq.device import half_precision_on_cpu

# (q, k, v, mask, causal, dropout) -> (context, weights): the paper's computation, weights included.
AttentionFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, bool, float], tuple[torch.Tensor, torch.Tensor]
]
MAX_QUERIES_FOR_MATMULS = 16  # decoding steps: up to this many queries per row take the matmul path
# SDPA's kernels on CUDA, less cuDNN's: it builds an execution plan for every new shape, and here every
# batch has new sequence lengths, every decoding step a new key length. Building the plans cost an
# update of the small model many times the GPU's own work (docs/performance.md, "GPU", has the
# measurement). Flash and memory-efficient attention need no plan.
SHAPE_AGNOSTIC_CUDA_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def decoding_precision(x: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A decoding step's queries, keys and values in the precision its attention and key/value cache
    use, given the layer input `x`. A half-precision model decoding on a CPU keeps its cache and does
    its attention in fp32: PyTorch's CPU batched matmuls of a decoding step are slower in bf16
    (docs/performance.md). The attention's output goes back to x's dtype before the output projection."""
    if half_precision_on_cpu(x):
        return tuple(t.float() for t in tensors)
    return tensors


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dropout: float,
    need_weights: bool,
    exact: AttentionFn,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of queries q (B*g, H, T, D) over keys and values k, v (B, H, S, D): `exact`, the
    paper's computation, or a fused kernel that equals it, whichever runs faster here. With g > 1
    (beam search), consecutive groups of g query rows share one key/value row: a sentence's beams
    are answered together. Returns the context (B*g, H, T, D) and, if `need_weights`, the weights."""
    group = q.size(0) // k.size(0)
    if group > 1:
        q = group_queries(q, k.size(0))
    # A single new query attends to every cached position: the causal mask is then a no-op. Written as
    # an `if`: compiled with dynamic shapes, `causal and q.size(2) > 1` is a symbolic bool, which SDPA's
    # is_causal does not take (it broke the graph at every decoder layer); a branch becomes a guard.
    if causal and q.size(2) == 1:
        causal = False
    if need_weights or _matmuls_beat_flash(q):
        context, weights = exact(q, k, v, mask, causal, dropout)
    else:
        context, weights = fused_attention(q, k, v, mask, causal, dropout), None
    if group > 1:
        context = ungroup(context, group)
        weights = ungroup(weights, group) if weights is not None else None
    return context, weights if need_weights else None


def _matmuls_beat_flash(q: torch.Tensor) -> bool:
    """Decoding steps have a handful of queries; there PyTorch's CPU flash-attention kernel is slower
    than two matmuls and a softmax (docs/performance.md). The gradient check first: in a compiled
    training step the length is symbolic, and comparing it would make a guard that recompiles the
    step when a batch's width crosses MAX_QUERIES_FOR_MATMULS."""
    return not torch.is_grad_enabled() and q.device.type == "cpu" and q.size(2) <= MAX_QUERIES_FOR_MATMULS


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool, dropout: float
) -> torch.Tensor:
    """F.scaled_dot_product_attention, except that on a CPU half-precision inputs run in fp32:
    PyTorch's CPU flash-attention backward is far slower in bf16 than in fp32, and the casts cost
    little (docs/performance.md)."""
    if causal and q.size(2) != k.size(2):
        # Several new queries after a cached prefix: SDPA's is_causal aligns top-left, we need
        # bottom-right, so spell the mask out.
        tq, tk = q.size(2), k.size(2)
        allowed = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
        mask, causal = allowed if mask is None else mask & allowed, False
    if half_precision_on_cpu(q) and torch.is_grad_enabled():
        with torch.autocast("cpu", enabled=False):  # autocast would cast the inputs back down
            out = F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout, is_causal=causal
            )
        return out.to(q.dtype)
    if _on_cuda(q):
        with sdpa_kernel(SHAPE_AGNOSTIC_CUDA_KERNELS):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)


def _on_cuda(q: torch.Tensor) -> bool:
    return q.is_cuda


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
