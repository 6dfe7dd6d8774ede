"""Dropout with a cheaper random mask on a CPU.

`nn.Dropout` draws a double-precision Bernoulli sample per element, a large share of a CPU training
step (docs/performance.md, "Dropout"). Fifteen random bits per element are plenty: the drop probability is
rounded to a multiple of 2^-15 (0.1 becomes 0.100006). One int32 draw (uniform over 31 bits) gives the
15-bit fields of two elements, so the generator runs once per two elements. The mask still comes from
torch's CPU generator, so seeding and checkpointed RNG state reproduce it exactly. Elsewhere (CUDA)
this is plain `F.dropout`.

Traced by torch.compile (compile=true) on a CPU, the same cheap mask is drawn by a custom operator
(`seq2seq::keep_mask`), which Inductor calls as it is: the mask is a 1-byte tensor made once and held
to the backward, as eager holds it. Inductor's own random numbers cost more on a CPU: `rand` (what
`F.dropout` draws) it writes out as an fp32 buffer held to the backward (4 bytes an element), and
`randint` it recomputes from the seed in every loop of every kernel that reads the mask (a layer norm's
kernels loop over their rows two or three times, forward and backward), which made the compiled update
slower than eager (docs/performance.md, "The compiled update's memory"). On a GPU, traced, the mask is
`randint`'s 15 bits against the same threshold: recomputing it there is cheap and holds no mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

INT16_LEVELS = 2**15  # int16.random_() draws uniformly from [0, 2^15)


def cheap_mask_applies(x: torch.Tensor) -> bool:
    """The cheaper mask is for CPU tensors run eagerly; a GPU run eagerly takes `F.dropout`. Code that
    torch.compile traces takes `traced_keep_mask`: the cheap mask's in-place `random_` cannot be
    traced as it is (it would break the graph at every dropout), so it is wrapped in a custom operator."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def cheap_keep_mask(shape: torch.Size | tuple[int, ...], threshold: int) -> torch.Tensor:
    """True where an element is kept: its 15-bit field of an int32 draw at or above `threshold`."""
    count = math.prod(shape)
    bits = torch.empty((count + 1) // 2, dtype=torch.int32).random_().view(torch.int16)[:count]
    return (bits.bitwise_and_(INT16_LEVELS - 1) >= threshold).view(shape)


# nondeterministic_seeded: two calls on equal inputs are different draws (the compiler must not merge
# them) and the backward may not recompute one: it holds the mask the forward drew.
# The tag does not stop AOTAutograd's common-subexpression pass, which spares only a fixed list of
# aten's random operators: two calls with the same arguments (one tensor dropped from twice) were
# merged into one draw, the two dropouts then sharing a mask. `draw` is a fresh empty tensor at every
# call, which that pass never merges (aten.empty is on its list), so no two calls have equal arguments.
@torch.library.custom_op("seq2seq::keep_mask", mutates_args=(), tags=(torch.Tag.nondeterministic_seeded,))
def keep_mask_op(like: torch.Tensor, threshold: int, draw: torch.Tensor) -> torch.Tensor:
    """The cheap mask in `like`'s shape, as one operator the compiler calls but does not trace."""
    return cheap_keep_mask(like.shape, threshold)


@keep_mask_op.register_fake
def _(like: torch.Tensor, threshold: int, draw: torch.Tensor) -> torch.Tensor:
    return torch.empty(like.shape, dtype=torch.bool, device=like.device)


def traced_keep_mask(x: torch.Tensor, threshold: int) -> torch.Tensor:
    """True where x's element is kept, drawn as the cheap mask decides it: on a CPU by the cheap mask
    itself (`keep_mask_op`), elsewhere from `torch.randint`, which Inductor recomputes from the seed
    where it is used instead of storing it (see the module's docstring)."""
    if x.device.type == "cpu":
        return keep_mask_op(x.detach(), threshold, torch.empty(0))
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
        return cheap_keep_mask(shape, self.threshold)

    def extra_repr(self) -> str:
        return f"p={self.p}"
