"""A model's parameters and gradients as views into one flat buffer each, so that the optimiser and
the gradient clipping run as a handful of operators on a few long vectors instead of a loop over every
parameter.

Why: PyTorch's multi-tensor kernels (`_foreach_*`, the fused Adam) take the whole list of parameters,
but on a CPU they run as one nested operator per parameter, and on a GPU as a kernel per chunk of
tensors: a large share of an update's operator calls (docs/performance.md, "Flat parameters").
Megatron's and DeepSpeed's optimisers keep their parameters flat for the same reason. Each parameter's values and gradient stay where the model
looks for them (`param.data`, `param.grad`), as views: autograd accumulates into the gradient views in
place (a gradient that exists is added to, never replaced), and loading a state dict copies into them.

The cost: every parameter has a gradient from the start (zeros until the backward reaches it), so an
optimiser over the buffer updates every parameter every step; in this model the loss reaches them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

ALIGNMENT_BYTES = 64  # each parameter starts on a cache line (and a vector load's boundary)
# The gradient norm is taken over rows of this many elements, then over the rows' norms: one fp32
# reduction over millions of elements accumulates enough rounding to be off in the third digit (CPU),
# while per-row sums stay as exact as per-parameter ones. Each buffer's length is a multiple of it.
NORM_ROW = 4096


class GradientReplaced(RuntimeError):
    """Code outside set `param.grad` to a tensor of its own: the optimiser would not see it."""


class FlatParameters:
    """Owns the buffers: one for values and one for gradients per (device, dtype) of the parameters.
    `buffers[g]` is a flat tensor whose `.grad` is the gradient buffer; `places[i]` says where
    parameter i lives: (group, start, numel)."""

    def __init__(self, params: Iterable[torch.nn.Parameter]) -> None:
        self.params = [param for param in params if param.requires_grad]  # a frozen one stays as it is
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for index, param in enumerate(self.params):
            groups.setdefault((param.device, param.dtype), []).append(index)
        self.buffers: list[torch.Tensor] = []
        self.places: list[tuple[int, int, int]] = [(0, 0, 0)] * len(self.params)
        for group, ((device, dtype), indices) in enumerate(groups.items()):
            step = max(1, ALIGNMENT_BYTES // torch.empty((), dtype=dtype).element_size())
            start = 0
            for index in indices:
                numel = self.params[index].numel()
                self.places[index] = (group, start, numel)
                start += -(-numel // step) * step
            values = torch.zeros(-(-start // NORM_ROW) * NORM_ROW, dtype=dtype, device=device)
            values.grad = torch.zeros_like(values)
            self.buffers.append(values)
        with torch.no_grad():
            for param, view, grad in zip(self.params, self.split_values(), self.split_gradients(), strict=True):
                view.copy_(param)
                param.data = view
                param.grad = grad
        self._gradient_addresses = [param.grad.data_ptr() for param in self.params]

    def views(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each parameter's part of `flat` (tensors laid out as `buffers`), shaped as the parameter."""
        return [
            flat[group].narrow(0, start, numel).view_as(param)
            for param, (group, start, numel) in zip(self.params, self.places, strict=True)
        ]

    def split_values(self) -> list[torch.Tensor]:
        return self.views(self.buffers)

    def split_gradients(self) -> list[torch.Tensor]:
        return self.views([values.grad for values in self.buffers])

    def gradients(self) -> list[torch.Tensor]:
        """The gradient buffers, after checking that every parameter's gradient is still its view."""
        for param, address in zip(self.params, self._gradient_addresses, strict=True):
            if param.grad is None or param.grad.data_ptr() != address:
                raise GradientReplaced(
                    "a parameter's gradient was replaced or set to None; with flat parameters write into "
                    "`param.grad` (copy_, zero_) instead"
                )
        return [values.grad for values in self.buffers]

    def accumulate(self, gradients: Sequence[torch.Tensor | None]) -> None:
        """Adds each parameter's new gradient (None: the loss did not reach it) into its view of the
        buffer, the last parameter first: about the order a backward pass completes them (the last
        layer's first, the embeddings' last). Compiled, the additions are a chain on one buffer, so
        that order decides how early each can run and free what its gradient was made from."""
        # Each view by as_strided, not `split_gradients`' narrow: compiled, an add into a narrowed view
        # is functionalised into a slice_scatter, which Inductor keeps out of place (to fuse it with
        # what reads the result), so the chain of them held full-size copies of the buffer; an
        # as_strided_scatter it always turns back into an add in place (torch/_inductor/fx_passes/
        # reinplace.py, _ALWAYS_MUTATING_SCATTER_OPS). Eager, the views are the same memory. In place,
        # each add is one vectorised loop in half precision as well: no one-pass form is needed there.
        buffers = [values.grad for values in self.buffers]
        for param, (group, start, _), gradient in reversed(list(zip(self.params, self.places, gradients, strict=True))):
            if gradient is not None:
                buffers[group].as_strided(param.shape, param.stride(), start).add_(gradient)

    def gradient_norm(self) -> torch.Tensor:
        """The 2-norm of all gradients, as a device scalar (see NORM_ROW). Unchecked: the optimiser's
        step checks the gradients once an update (`gradients`), before any weight moves."""
        rows = [torch.linalg.vector_norm(values.grad.view(-1, NORM_ROW), dim=1) for values in self.buffers]
        return torch.linalg.vector_norm(torch.cat(rows))

    def zero_grad(self) -> None:
        for values in self.buffers:
            values.grad.zero_()

    def zeros_like_buffers(self) -> list[torch.Tensor]:
        return [torch.zeros_like(values) for values in self.buffers]


def independent_copies(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` (a model's state dict) with each tensor copied out of the flat buffer it views, so that
    what is saved is each parameter's own storage, not the buffer; tensors that were one parameter
    (tied weights: the same data, shape and strides) stay one tensor."""
    copies: dict[tuple[int, torch.Size, tuple[int, ...], torch.dtype], torch.Tensor] = {}
    result = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype)
        if key not in copies:
            copies[key] = tensor.clone()
        result[name] = copies[key]
    return result
