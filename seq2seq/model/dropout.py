"""Dropout with a cheaper random mask on a CPU.

`nn.Dropout` draws a double-precision Bernoulli sample per element, a large share of a CPU training
step (docs/performance.md, "Dropout"). Fifteen random bits per element are plenty: the drop probability is
rounded to a multiple of 2^-15 (0.1 becomes 0.100006). One int32 draw (uniform over 31 bits) gives the
15-bit fields of two elements, so the generator runs once per two elements. The mask still comes from
torch's CPU generator, so seeding and checkpointed RNG state reproduce it exactly. Elsewhere (CUDA)
this is plain `F.dropout`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

INT16_LEVELS = 2**15  # int16.random_() draws uniformly from [0, 2^15)


def cheap_mask_applies(x: torch.Tensor) -> bool:
    """The cheaper mask is for CPU tensors run eagerly. A GPU takes `F.dropout`, and so does code that
    torch.compile traces (compile=true), on any device: the mask's in-place `random_` cannot be traced
    (it would break the graph at every dropout), and the compiler draws F.dropout's random numbers
    inside its own fused kernels, where no mask is written out."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.threshold = round(p * INT16_LEVELS)
        self.scale = 1.0 / (1.0 - self.threshold / INT16_LEVELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if not cheap_mask_applies(x):
            return F.dropout(x, self.p, training=True)
        return x * self._keep_mask(x.shape) * self.scale

    def _keep_mask(self, shape: torch.Size) -> torch.Tensor:
        count = math.prod(shape)
        bits = torch.empty((count + 1) // 2, dtype=torch.int32).random_().view(torch.int16)[:count]
        return (bits.bitwise_and_(INT16_LEVELS - 1) >= self.threshold).view(shape)

    def extra_repr(self) -> str:
        return f"p={self.p}"
