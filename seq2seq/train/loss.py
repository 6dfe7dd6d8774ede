"""Label-smoothed cross-entropy over the real (non-pad) target positions (paper §5.4).

Two implementations of the same number:
- `label_smoothed_loss`: the plain one, from full logits (simple, used as the reference in tests, and
  by R-Drop, which needs the full distributions of both passes anyway);
- `ProjectedSmoothedLoss`: the output projection and the loss fused and computed in row chunks, with
  the gradient written out by hand. The (tokens x vocabulary) logits are the largest tensors of a
  training step (8k vocabulary x 4k tokens = 130 MB in fp32, several times over with their softmax
  and gradients); in chunks they are never held whole, and the backward needs one pass over each
  chunk instead of autograd's five (log_softmax, gather, mean and their backwards).

Code that torch.compile traces takes a third, the same number again in a fixed count of chunks
(`compiled_loss.chunked_smoothed_loss`): this one's row loop would be a graph per batch size there.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from seq2seq.model.transformer import Transformer
from seq2seq.train.compiled_loss import chunked_smoothed_loss

CHUNK_ROWS = 1024  # rows of logits alive at once: 1024 x 8k x 4 bytes = 32 MB
# On a GPU each chunk's ~50 operators (forward and back) are kernel launches, and the host issuing them
# is what limits training there (docs/performance.md "GPU"), so the loss is one chunk wherever memory
# allows: a chunk's fp32 logits may take this share of the memory free when the loss first runs (its
# backward holds about three tensors that size, and later batches may be longer than the first), and
# never less than GPU_CHUNK_BYTES (8,388 rows at an 8k vocabulary).
GPU_FREE_MEMORY_SHARE = 1 / 16
GPU_CHUNK_BYTES = 256 * 2**20


def chunk_rows(vocab: int, device: torch.device) -> int:
    """Rows of logits computed at once on `device`."""
    if device.type != "cuda":
        return CHUNK_ROWS
    budget = max(GPU_CHUNK_BYTES, int(free_gpu_bytes(device.index) * GPU_FREE_MEMORY_SHARE))
    return max(CHUNK_ROWS, budget // (4 * vocab))


@functools.cache
def free_gpu_bytes(index: int | None) -> int:
    """The GPU's free memory, read once per process (the loss runs outside the compiled graph, so this
    driver call is made once, eagerly; the share of it is a bound, not a figure to follow)."""
    return torch.cuda.mem_get_info(index)[0]


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits: (N, V), target: (N,) -> (summed smoothed loss, summed NLL), in fp32.

    Smoothing spreads `smoothing` of the probability mass uniformly over the vocabulary, as
    `F.cross_entropy(label_smoothing=...)` does: loss = (1 - e) * NLL + e * mean_v(-log p_v)."""
    return _smoothed_from_log_probs(logits.float().log_softmax(dim=-1), target, smoothing)


def _smoothed_from_log_probs(
    log_probs: torch.Tensor, target: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss.sum(), nll.sum()


def rdrop_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """R-Drop (Liang et al. 2021, "R-Drop: Regularized Dropout for Neural Networks"): logits (2N, V) are
    the same N target positions predicted twice under independent dropout masks, first copy first.

    The paper's loss is CE_1 + CE_2 + alpha/2 (KL(P_1||P_2) + KL(P_2||P_1)); returned halved, so that the
    loss (and the learning rate that suits it) keeps the scale of one pass: (summed loss, summed NLL),
    fp32, both per copy. KL(P||Q) + KL(Q||P) = sum_v (p_v - q_v)(log p_v - log q_v)."""
    log_probs = logits.float().log_softmax(dim=-1)
    loss, nll = _smoothed_from_log_probs(log_probs, target, smoothing)
    log_p, log_q = log_probs.chunk(2)
    symmetric_kl = ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum()
    return (loss + alpha / 2 * symmetric_kl) / 2, nll / 2


class ProjectedSmoothedLoss(torch.autograd.Function):
    """(hidden (N, d), weight (V, d), target (N,)) -> summed smoothed loss and summed NLL (fp32).

    With z = h W^T and lse = logsumexp(z): NLL = lse - z_target, mean_v(-log p_v) = lse - mean(z),
    and d loss / d z = softmax(z) - (1 - e) onehot(target) - e / V."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        target: torch.Tensor,
        smoothing: float,
        dtype: torch.dtype,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`bias`: a fixed (not trained) bias on the logits, or None (the model's output_bias)."""
        h, w = hidden.to(dtype), weight.to(dtype)
        lse = torch.empty(h.size(0), dtype=torch.float32, device=h.device)
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        nll = torch.zeros((), dtype=torch.float32, device=h.device)
        step = chunk_rows(w.size(0), h.device)
        for start in range(0, h.size(0), step):
            rows = slice(start, start + step)
            logits = _add(h[rows] @ w.t(), bias)  # (n, V), fp32
            lse[rows] = torch.logsumexp(logits, dim=-1)
            chunk_nll = lse[rows] - logits.gather(1, target[rows, None]).squeeze(1)
            uniform = lse[rows] - logits.mean(dim=-1)
            loss += ((1.0 - smoothing) * chunk_nll + smoothing * uniform).sum()
            nll += chunk_nll.sum()
        ctx.save_for_backward(hidden, weight, target, lse, bias)
        ctx.smoothing, ctx.dtype = smoothing, dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, target, lse, bias = ctx.saved_tensors
        h, w = hidden.to(ctx.dtype), weight.to(ctx.dtype)
        eps, vocab = ctx.smoothing, weight.size(0)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        step = chunk_rows(vocab, h.device)
        for start in range(0, h.size(0), step):
            rows = slice(start, start + step)
            grad = _add(h[rows] @ w.t(), bias).sub_(lse[rows, None]).exp_()  # softmax, recomputed
            grad.sub_(eps / vocab)
            grad.scatter_add_(1, target[rows, None], torch.full_like(lse[rows, None], -(1.0 - eps)))
            grad.mul_(grad_loss)
            grad = grad.to(ctx.dtype)
            grad_hidden[rows] = (grad @ w).to(hidden.dtype)
            grad_weight += (grad.t() @ h[rows]).float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None


def _add(logits: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Logits in fp32, with the fixed output bias when the model has one."""
    return logits.float() if bias is None else logits.float() + bias.float()


class TeacherForcedLoss(nn.Module):
    """The training objective as one module: teacher-forced forward pass, output projection of the
    non-pad target positions only (padding costs no vocabulary matmul), and the loss. It is what
    DistributedDataParallel wraps, so everything that touches parameters happens in `forward`.

    With `rdrop_alpha` > 0, training (not validation) adds R-Drop's consistency term (`rdrop_loss`): the
    batch runs twice in one forward pass, stacked, so each copy draws its own dropout masks: an update
    computes every row twice. It takes the model's full logits (`Transformer.logits`), not the fused loss."""

    def __init__(self, model: Transformer, smoothing: float, rdrop_alpha: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.smoothing = smoothing
        self.rdrop_alpha = rdrop_alpha

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        tgt_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (summed smoothed loss, summed NLL) over the non-pad target tokens. `tgt_positions`: their
        flat indices in (B*T) (`Batch.to` makes them); without, a boolean mask finds them, whose
        result size a GPU must send back to the host before the loss can go on."""
        rdrop = self.training and self.rdrop_alpha > 0
        if tgt_positions is None:
            tgt_positions = (tgt_out != self.model.pad_id).flatten().nonzero().squeeze(1)
        if rdrop:  # copy 2's positions follow copy 1's, as its rows do
            src, tgt_in, tgt_out = torch.cat([src, src]), torch.cat([tgt_in, tgt_in]), torch.cat([tgt_out, tgt_out])
            tgt_positions = torch.cat([tgt_positions, tgt_positions + tgt_in.numel() // 2])
        memory, src_mask = self.model.encode(src)
        hidden = self.model.decode(tgt_in, memory, src_mask)  # (B, T, d_model), not logits: projected below
        hidden = hidden.flatten(0, 1).index_select(0, tgt_positions)
        target = tgt_out.flatten().index_select(0, tgt_positions)
        if rdrop:
            return rdrop_loss(self.model.logits(hidden), target, self.smoothing, self.rdrop_alpha)
        dtype = (
            torch.get_autocast_dtype(hidden.device.type)
            if torch.is_autocast_enabled(hidden.device.type)
            else hidden.dtype
        )
        weight, bias = self.model.output.weight, self.model.output_bias
        if torch.compiler.is_compiling():
            # Traced by torch.compile (compile=true): this loss's row loop would be unrolled to each
            # batch's row count (a recompile per batch); compiled_loss.py cuts the rows into a fixed
            # number of chunks instead, one graph for all.
            return chunked_smoothed_loss(hidden, weight, target, self.smoothing, dtype, bias)
        return ProjectedSmoothedLoss.apply(hidden, weight, target, self.smoothing, dtype, bias)
