"""What a training update asks of the machine beyond its arithmetic, counted rather than timed:
operator calls, reads from the device back to the host, GPU kernels and GPU busy time, and the
shapes an epoch's batches come in. Used by scripts/bench_train.py; counts do not drift with load.

A GPU runs what the host queues; the host must stay ahead. Every operator is a kernel launch (a few
microseconds of host time each), and every read-back (`.item()`, `float(t)`, a boolean mask's size)
makes the host wait until the queue has drained, after which the GPU waits for the host.
"""

from __future__ import annotations

import collections
import contextlib
import re
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from seq2seq.data.batching import padded_width

# Operators whose result size or value the host needs: each one waits for the GPU's queue to drain.
SYNCING_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::is_nonzero", "aten::equal"}
# Python conversions of a tensor to host values: on a GPU tensor each one is a read-back.
CONVERSIONS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


@contextlib.contextmanager
def count_conversions() -> Iterator[collections.Counter]:
    """Counts calls of the tensor-to-host conversions, by (conversion, device type of the tensor)."""
    counts: collections.Counter = collections.Counter()
    originals = {name: getattr(torch.Tensor, name) for name in CONVERSIONS}

    def counting(name: str, original: Callable) -> Callable:
        def convert(self: torch.Tensor, *args: object, **kwargs: object) -> object:
            counts[(name, self.device.type)] += 1
            return original(self, *args, **kwargs)

        return convert

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(name, original))
    try:
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def host_reads_per_update(step: Callable[[], object], updates: int, device: torch.device) -> dict[str, float]:
    """Read-backs per update over `updates` calls of `step`: Python conversions of tensors on the
    training device (on a CPU, every conversion counts: nothing tells a device tensor apart there),
    and operators that need their result on the host. On a GPU also CUDA's own count: the
    synchronisations torch.cuda.set_sync_debug_mode reports."""
    with count_conversions() as conversions, profile(activities=[ProfilerActivity.CPU]) as prof:
        cuda_syncs = _cuda_sync_warnings(step, updates) if device.type == "cuda" else None
        if cuda_syncs is None:
            for _ in range(updates):
                step()
    syncing = sum(
        1 for e in prof.events() if e.name in SYNCING_OPS and not inside_fused_optimizer(e) and not from_a_conversion(e)
    )
    converted = sum(n for (_, kind), n in conversions.items() if kind == device.type)
    result = {
        "host_syncs_per_update": (converted + syncing) / updates,
        "tensor_conversions_per_update": converted / updates,
        "syncing_operators_per_update": syncing / updates,
    }
    if cuda_syncs is not None:
        result["cuda_synchronizations_per_update"] = cuda_syncs / updates
    return result


def from_a_conversion(event: object) -> bool:
    """`float(t)` and `t.item()` from Python run aten::item -> aten::_local_scalar_dense: already
    counted as a conversion, not again as an operator."""
    parent = event.cpu_parent
    return (
        event.name == "aten::_local_scalar_dense"
        and parent is not None
        and parent.name == "aten::item"
        and (parent.cpu_parent is None or not parent.cpu_parent.name.startswith("aten::"))
    )


def inside_fused_optimizer(event: object) -> bool:
    """The fused Adam's CPU kernel reads its step counts with item(): host memory, no wait, and
    its CUDA kernel reads them on the device, so they are not counted."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::_fused_adam"):
            return True
        parent = parent.cpu_parent
    return False


def _cuda_sync_warnings(step: Callable[[], object], updates: int) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(updates):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum(1 for w in caught if "synchroniz" in str(w.message).lower())


# Operators that only describe a tensor anew (shape, strides, offset) or only allocate one: no kernel
# on a GPU.
VIEW_OPS = {
    f"aten::{name}"
    for name in (
        "view", "_unsafe_view", "reshape", "t", "transpose", "permute", "as_strided", "slice", "select",
        "narrow", "chunk", "split", "split_with_sizes", "unsqueeze", "squeeze", "expand", "detach", "alias",
        "unbind", "view_as", "unflatten", "flatten", "empty", "empty_like", "empty_strided", "resize_", "lift_fresh",
    )
}  # fmt: skip


# Inductor's generated kernels as the profiler names them (with torch._inductor.config.cpp.
# enable_kernel_profile, which `count_generated_kernels` sets): graph_<n>_cpp_fused_<ops>_<i>.
GENERATED_KERNEL = re.compile(r"^graph_\d+_cpp_")


def count_generated_kernels() -> None:
    """Inductor's C++ kernels each record a profiler event (set before anything compiles; it is part
    of the generated code, so compiled code cached without it is compiled again)."""
    import torch._inductor.config

    torch._inductor.config.cpp.enable_kernel_profile = True


def operator_calls_per_update(step: Callable[[], object], updates: int) -> dict[str, float]:
    """Every `aten::` event the profiler records, nested ones included (the issue's count), the
    top-level ones (what Python dispatched), and the kernel candidates: innermost operators that
    compute (not views, not allocations: what a GPU would launch), per update. Where the update is
    compiled (compile=true) also Inductor's generated kernels (`count_generated_kernels`) and the
    launches: those kernels plus the top-level operators that compute, in the compiled code the
    extern calls (matrix products, attention) and outside it the few eager operators around it. A
    GPU launches more for the same graph: the same extern calls, but Triton makes a kernel of each
    loop nest that C++ fuses with others (scripts/count_gpu_kernels.py counts the Triton code)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(updates):
            step()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    innermost = [e for e in events if not any(c.name.startswith("aten::") for c in e.cpu_children)]
    generated = sum(1 for e in prof.events() if GENERATED_KERNEL.match(e.name))
    top_computing = sum(e.name not in VIEW_OPS for e in top)
    counts = {
        "operator_calls_per_update": len(events) / updates,
        "top_level_operator_calls_per_update": len(top) / updates,
        "kernel_candidates_per_update": sum(e.name not in VIEW_OPS for e in innermost) / updates,
    }
    if generated:
        counts["generated_kernels_per_update"] = generated / updates
        counts["extern_and_eager_calls_per_update"] = top_computing / updates
        counts["launches_per_update"] = (generated + top_computing) / updates
    return counts


def peak_allocated_per_update(step: Callable[[], object], updates: int) -> dict[str, float]:
    """The most host memory the updates held at once beyond what was held before the first, from the
    profiler's record of every allocation and free through torch's CPU allocator (profile_memory), in
    time order: activations, gradients' temporaries, the loss's logits; not the weights and optimiser
    state allocated before. An allocation count, so it does not drift with load (oneDNN's scratch
    space is not in it: it does not go through torch's allocator)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(updates):
            step()
    host = (torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.MKLDNN)
    records = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() in host
    )
    held = peak = 0
    for _, nbytes in records:
        held += nbytes
        peak = max(peak, held)
    return {"peak_allocated_mb": peak / 2**20}


def generated_kernel_names(step: Callable[[], object]) -> dict[str, int]:
    """Inductor's generated kernels of one update by name (`count_generated_kernels`), less the graph's
    number: the names list the operators each kernel fused (e.g. cpp_fused_add_native_layer_norm_3)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = collections.Counter(
        GENERATED_KERNEL.sub("cpp_", e.name) for e in prof.events() if GENERATED_KERNEL.match(e.name)
    )
    return dict(sorted(names.items()))


def gpu_time_per_update(step: Callable[[], object], updates: int) -> dict[str, float]:
    """GPU kernels per update and the time the GPU spent in them (their intervals' union, so two
    overlapping kernels count once), from the profiler's CUDA activity."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(updates):
            step()
        torch.cuda.synchronize()
    intervals = sorted(
        (e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy_us, end = 0.0, float("-inf")
    for start, stop in intervals:
        if stop > end:
            busy_us += stop - max(start, end)
            end = stop
    # Where the host's time goes: the operators with the most CPU time of their own (not their
    # children's), microseconds per update. Python's own time between operators is not in it.
    host = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    return {
        "gpu_kernels_per_update": len(intervals) / updates,
        "gpu_seconds_per_update": busy_us / 1e6 / updates,
        "host_top_self_cpu_us_per_update": {e.key: round(e.self_cpu_time_total / updates, 1) for e in host},
    }


def batch_shape(src_len: np.ndarray, tgt_len: np.ndarray, indices: np.ndarray, multiple: int) -> tuple[int, int, int]:
    """(sentences, source width, target width) of the batch `collate` makes of `indices`: each side's
    longest line plus its EOS/BOS, rounded up to `multiple`."""
    return (
        len(indices),
        padded_width(int(src_len[indices].max()) + 1, multiple),
        padded_width(int(tgt_len[indices].max()) + 1, multiple),
    )


def shapes_per_epoch(src_len: np.ndarray, tgt_len: np.ndarray, batches: list[np.ndarray], multiple: int) -> dict:
    """The distinct (sentences, source width, target width) shapes of an epoch's batches and the
    (source, target) widths alone, with the tokens the padding adds: `collate`'s widths, rounded up
    to `multiple`."""
    shapes, widths = set(), set()
    real = padded = 0
    for indices in batches:
        shape = batch_shape(src_len, tgt_len, indices, multiple)
        _, src_width, tgt_width = shape
        shapes.add(shape)
        widths.add((src_width, tgt_width))
        real += int(src_len[indices].sum() + tgt_len[indices].sum()) + 2 * len(indices)
        padded += len(indices) * (src_width + tgt_width)
    return {
        "pad_to_multiple": multiple,
        "batches": len(batches),
        "distinct_shapes": len(shapes),
        "distinct_widths": len(widths),
        "padding_share_of_tokens": round(1 - real / padded, 4),
    }


def compiled_graphs_per_epoch(trainer: Any, batches: list[np.ndarray], multiple: int) -> dict:
    """How many graphs TorchDynamo makes of the whole update over an epoch's `batches` (padded to
    `multiple`), traced as compile=true traces it (seq2seq/train/compiled_update.py), one batch of each
    distinct shape. Backend "eager": only the tracing, whose graphs and recompiles are the compiler's;
    the code generation after it is not run, so this counts in seconds on a CPU what a GPU would
    compile. The updates are made: the trainer's weights move (call it last)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from seq2seq.data.batching import collate
    from seq2seq.train.compiled_update import CompiledUpdate

    stream, update = trainer.stream, trainer.update
    first_of_shape: dict[tuple[int, int, int], np.ndarray] = {}
    for indices in batches:
        first_of_shape.setdefault(batch_shape(stream.src_len, stream.tgt_len, indices, multiple), indices)
    torch._dynamo.reset()
    counters.clear()
    compiled = CompiledUpdate(
        trainer.objective,
        update.parameters,
        update.optimizer,
        update.parts.optim.clip_norm,
        update.autocast,
        None,
    )
    compiled._last = torch.compile(compiled._last_pass_and_step, backend="eager")
    trainer.objective.train()
    began = time.perf_counter()
    for indices in first_of_shape.values():
        batch = collate(trainer.data.train, indices, trainer.parts.batches.max_positions, pad_multiple=multiple)
        batch = batch.to(trainer.device)
        lr = update.optimizer.next_rate()
        compiled.last_pass_and_step(batch, 1.0 / batch.tgt_tokens, torch.zeros((), device=trainer.device), lr)
        update.optimizer.count_update(lr)
    breaks = counters["graph_break"]
    return {
        "pad_to_multiple": multiple,
        "distinct_shapes": len(first_of_shape),
        "graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": {reason.splitlines()[0]: count for reason, count in breaks.items()},
        "tracing_seconds": round(time.perf_counter() - began, 1),
    }
