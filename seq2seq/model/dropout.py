"""Dropout with a cheaper random mask on a CPU.

`nn.Dropout` draws a double-precision Bernoulli sample per element, a large share of a CPU training
step (docs/performance.md, "Dropout"). Fifteen random bits per element are plenty: the drop probability is
rounded to a multiple of 2^-15 (0.1 becomes 0.100006). One int32 draw (uniform over 31 bits) gives the
15-bit fields of two elements, so the generator runs once per two elements. The mask still comes from
torch's CPU generator, so seeding and checkpointed RNG state reproduce it exactly. Elsewhere (CUDA)
this is plain `F.dropout`.

Traced by torch.compile (compile=true, any device) the mask is `torch.randint`'s 15 bits compared
with the same threshold. Inductor writes `rand` (what `F.dropout` draws) out as an fp32 buffer, which
the backward then needs: 4 bytes per element held from each dropout to its backward, against eager's
1-byte mask. `randint` it leaves as a function of the seed and the element's index, which the
forward's kernel and the backward's each recompute where they use it: no mask is held at all
(docs/performance.md, "The compiled update's memory").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

INT16_LEVELS = 2**15  # int16.random_() draws uniformly from [0, 2^15)


def cheap_mask_applies(x: torch.Tensor) -> bool:
    """The cheaper mask is for CPU tensors run eagerly; a GPU run eagerly takes `F.dropout`. Code that
    torch.compile traces takes `traced_keep_mask` on any device: the cheap mask's in-place `random_`
    cannot be traced (it would break the graph at every dropout)."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def traced_keep_mask(x: torch.Tensor, threshold: int) -> torch.Tensor:
    """True where x's element is kept: a uniform 15-bit draw at or above `threshold`, as the cheap
    mask decides it, from `torch.randint`, which Inductor recomputes from the seed where it is used
    instead of storing it (see the module's docstring)."""
    return torch.randint(0, INT16_LEVELS, x.shape, device=x.device) >= threshold


class Dropout(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p
        self.threshold = round(p * INT16_LEVELS)
        self.scale = 1.0 / (1.0 - self.threshold / INT16_LEVELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        if torch.compiler.is_compiling():
            return x * traced_keep_mask(x, self.threshold) * self.scale
        if not cheap_mask_applies(x):
            return F.dropout(x, self.p, training=True)
        return x * self._keep_mask(x.shape) * self.scale

    def _keep_mask(self, shape: torch.Size) -> torch.Tensor:
        count = math.prod(shape)
        bits = torch.empty((count + 1) // 2, dtype=torch.int32).random_().view(torch.int16)[:count]
        return (bits.bitwise_and_(INT16_LEVELS - 1) >= self.threshold).view(shape)

    def extra_repr(self) -> str:
        return f"p={self.p}"
