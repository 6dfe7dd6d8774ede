"""The output projection and the label-smoothed loss in a fixed number of row chunks, for the code that
torch.compile traces (compile=true): the (tokens x vocabulary) logits and their gradient are never held
whole, and one graph serves every batch.

The eager loss (`loss.ProjectedSmoothedLoss`) walks the rows CHUNK_ROWS at a time: traced, that loop
would be unrolled to each batch's row count (a graph per count). Here the N rows are cut into
LOSS_CHUNKS pieces of ceil(N / LOSS_CHUNKS) + 1 rows whatever N is; the last row is repeated to fill the
last piece, with weight 0. The chunk count is a constant of the graph and the sizes symbolic
expressions of N: no guard on N's value, so no recompile.

The gradient is made in the forward pass, chunk by chunk, while the chunk's logits are at hand (as
Liger-Kernel's fused linear cross-entropy does): three matrix products a chunk (logits, d hidden,
d weight) and nothing recomputed; the backward only scales the two gradients by the loss's. A training
step always asks for them, so this costs nothing there; a step without gradients takes
`chunked_smoothed_loss`, which makes none.
"""

from __future__ import annotations

from typing import Any

import torch

LOSS_CHUNKS = 4  # pieces of the rows; one piece's fp32 logits (N/4 x V) are the loss's largest tensor


def chunked_smoothed_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    smoothing: float,
    dtype: torch.dtype,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden (N, d), weight (V, d), target (N,) -> (summed smoothed loss, summed NLL), fp32, as
    `loss.label_smoothed_loss` of the logits hidden @ weight.T (+ bias) gives them; the matrix products
    in `dtype`. Differentiable in hidden and weight where gradients are being recorded."""
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return ChunkedSmoothedLoss.apply(hidden, weight, target, smoothing, dtype, bias)
    loss, nll, _, _ = _chunked(hidden, weight, target, smoothing, dtype, bias, with_gradients=False)
    return loss, nll


class ChunkedSmoothedLoss(torch.autograd.Function):
    """The loss of `chunked_smoothed_loss` with its gradient computed in the forward pass."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        target: torch.Tensor,
        smoothing: float,
        dtype: torch.dtype,
        bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss, nll, grad_hidden, grad_weight = _chunked(hidden, weight, target, smoothing, dtype, bias, True)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = hidden.dtype, weight.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return (
            (grad_hidden * grad_loss).to(hidden_dtype),
            (grad_weight * grad_loss).to(weight_dtype),
            None,
            None,
            None,
            None,
        )


def _chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    smoothing: float,
    dtype: torch.dtype,
    bias: torch.Tensor | None,
    with_gradients: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """-> (loss, nll, d loss / d hidden (N, d) fp32, d loss / d weight (V, d) fp32), the gradients
    None without `with_gradients`. With z = h W^T and lse = logsumexp(z): NLL = lse - z_target,
    mean_v(-log p_v) = lse - mean(z), and d loss / d z = softmax(z) - (1 - e) onehot(target) - e / V."""
    rows, vocab = hidden.size(0), weight.size(0)
    # ceil(N / K) + 1: one spare row a chunk keeps every chunk 2 rows or more, where a chunk of one row
    # would be a second graph (a one-row matrix has other strides: TorchDynamo guards N >= 5 otherwise)
    per_chunk = (rows + LOSS_CHUNKS - 1) // LOSS_CHUNKS + 1
    padded = torch.arange(LOSS_CHUNKS * per_chunk, device=hidden.device)
    real = (padded < rows).float()  # the repeated rows weigh 0
    source_row = padded.clamp(max=rows - 1)
    h = hidden.to(dtype).index_select(0, source_row).view(LOSS_CHUNKS, per_chunk, -1)  # (K, n, d)
    t = target.index_select(0, source_row).view(LOSS_CHUNKS, per_chunk, 1)  # (K, n, 1)
    real = real.view(LOSS_CHUNKS, per_chunk)
    w = weight.to(dtype)
    vocab_ids = torch.arange(vocab, device=hidden.device)
    loss = nll = grad_weight = None
    grad_rows = []
    for chunk in range(LOSS_CHUNKS):  # a constant count: unrolled alike for every batch
        h_c, t_c, real_c = h[chunk], t[chunk], real[chunk]
        if chunk > 0:
            # Each chunk waits for the one before (its results so far, times 0): independent, Inductor
            # fuses the chunks' pointwise work into one kernel, which holds every chunk's logits at
            # once. The sums too: waiting for the gradient alone, the chunks' loss terms (a gather
            # and a mean of the logits) were left to one kernel after the last chunk, which held
            # three chunks' logits. 0 * x is not folded away; it is NaN only where x is, when the
            # loss is not finite.
            so_far = loss + nll + (grad_weight[0, 0] if with_gradients else 0.0)
            h_c = h_c + 0.0 * so_far.to(h_c.dtype)
        logits = h_c @ w.t()  # (n, V)
        logits = logits.float() if bias is None else logits.float() + bias.float()
        lse = torch.logsumexp(logits, dim=-1)
        chunk_nll = (lse - logits.gather(1, t_c).squeeze(1)) * real_c
        uniform = (lse - logits.mean(dim=-1)) * real_c
        chunk_loss = ((1.0 - smoothing) * chunk_nll + smoothing * uniform).sum()
        loss = chunk_loss if loss is None else loss + chunk_loss
        nll = chunk_nll.sum() if nll is None else nll + chunk_nll.sum()
        if not with_gradients:
            continue
        # One pointwise expression of the logits (the one-hot as a comparison, not a scatter), which
        # the compiler writes as one kernel beside the logsumexp's.
        onehot = (vocab_ids == t_c).float()
        grad = ((logits - lse[:, None]).exp() - smoothing / vocab - (1.0 - smoothing) * onehot) * real_c[:, None]
        grad = grad.to(dtype)
        grad_rows.append((grad @ w).float())  # (n, d)
        grad_w = (grad.t() @ h_c).float()  # (V, d)
        grad_weight = grad_w if grad_weight is None else grad_weight + grad_w
    if not with_gradients:
        return loss, nll, None, None
    grad_hidden = torch.cat(grad_rows)[:rows]  # the rows in order: row i of the pieces is row i, i < N
    return loss, nll, grad_hidden, grad_weight
