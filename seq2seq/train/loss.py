"""Label-smoothed cross-entropy over the real (non-pad) target positions (paper §5.4)."""

from __future__ import annotations

import torch
from torch import nn

from seq2seq.model.transformer import Transformer


class TargetLogits(nn.Module):
    """Teacher-forced forward pass that projects only the non-pad target positions to the vocabulary.

    The output projection is the largest matmul of the model; skipping padded positions saves its
    share of padding. This wrapper is also what DistributedDataParallel wraps, so the whole
    computation, projection included, happens inside one `forward`."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        hidden = self.model(src, tgt_in)  # (B, T, d_model)
        return self.model.output(hidden[tgt_out != self.model.pad_id])  # (N real tokens, V)


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits: (N, V), target: (N,) -> (summed smoothed loss, summed NLL), in fp32.

    Smoothing spreads `smoothing` of the probability mass uniformly over the vocabulary, as
    `F.cross_entropy(label_smoothing=...)` does: loss = (1 - e) * NLL + e * mean_v(-log p_v)."""
    log_probs = logits.float().log_softmax(dim=-1)
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss.sum(), nll.sum()
