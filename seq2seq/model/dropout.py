"""Dropout with a cheaper random mask on a CPU.

`nn.Dropout` draws a double-precision Bernoulli sample per element; on the CPU that was 12% of a
training step of the small model. Fifteen random bits per element (one int16 draw) are plenty: the
drop probability is rounded to a multiple of 2^-15 (0.1 becomes 0.100006). The mask still comes from
torch's CPU generator, so seeding and checkpointed RNG state reproduce it exactly. Elsewhere (CUDA)
this is plain `F.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

INT16_LEVELS = 2**15  # int16.random_() draws uniformly from [0, 2^15)


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.threshold = round(p * INT16_LEVELS)
        self.scale = 1.0 / (1.0 - self.threshold / INT16_LEVELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        keep = torch.empty(x.shape, dtype=torch.int16).random_() >= self.threshold
        return torch.where(keep, x, 0.0) * self.scale

    def extra_repr(self) -> str:
        return f"p={self.p}"
