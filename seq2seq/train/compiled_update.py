"""compile=true: an update as one graph that torch.compile (Inductor) turns into fused kernels.

Eager, an update is thousands of small operators, each a kernel launch on a GPU (docs/performance.md,
"What keeps a GPU waiting"). Compiled whole (the forward pass, the loss, the backward pass, the gradient
clipping, the finiteness check and Adam over the flat buffers), Inductor fuses pointwise work and
reductions across all of them into a few generated kernels (C++ on a CPU, Triton on a GPU) around the
matrix products. TorchDynamo traces autograd.grad (`trace_autograd_ops`), so the backward, the
accumulation into the flat gradient buffer and the optimiser are in the same graph as the forward.
The loss is the projection and label-smoothed loss in a fixed count of row chunks (compiled_loss.py):
the logits are never held whole, and one graph serves every row count.

Shapes: every batch has its own sentences and widths. Its dimensions are marked dynamic, so one graph
serves them all; TorchDynamo still recompiles where a guard it made on the first batches stops holding
(a width of 1, the source and target widths equal or not): a few graphs an epoch, each logged with the
seconds it took. Inductor's generated code and AOTAutograd's joint graphs are cached across runs in the
project's cache folder (`inductor/` beside precision.json), so a later run on the same machine and code
traces the update with TorchDynamo again but neither partitions nor compiles what it did before.

Under torchrun the step is a graph of its own: every micro-batch's forward and backward compiled
(`backward_pass`), the flat gradient buffers summed over the ranks in one all-reduce each, then the
clipping, the finiteness check and Adam compiled (`reduced_step`). On a CPU that is how several
processes of one thread each train faster than one process of as many threads (docs/performance.md,
"One process a core"). With fp16's grad scaler (whose unscaling is host-side bookkeeping) the update
compiles its objective only (update.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import torch

from seq2seq.data.batching import Batch
from seq2seq.measurement_cache import cache_file
from seq2seq.train.distributed import DistContext
from seq2seq.train.flat_parameters import FlatParameters
from seq2seq.train.loss import TeacherForcedLoss
from seq2seq.train.optim import Adam

log = logging.getLogger(__name__)

# Inductor stores a pointwise result used more than once only when it reads more than this many
# buffers (its default 4); below that each user recomputes it. A post-norm residual sum,
# x + dropout(sublayer), reads three (x, the sublayer's output, the mask): recomputed for the layer
# norm's backward, it held the bf16 sublayer's output beside x to the backward, where eager holds the
# sum alone. At 2 the sum is stored once and its parts are freed after the forward (docs/performance.md,
# "The residual sums"). On a CPU only: on a GPU its effect has not been counted.
CPU_REALIZE_READS_THRESHOLD = 2

INDUCTOR_CACHE = "inductor"  # under the cache folder; TORCHINDUCTOR_CACHE_DIR, where set, wins
# What a bf16 update's graph calls to enter and leave autocast (torch.amp.autocast_mode)
AUTOCAST_IN_GRAPH = ("_enter_autocast", "_exit_autocast")


def use_project_inductor_cache() -> str:
    """Inductor's cache (generated code, compiled kernels, FX graphs) in the project's cache folder,
    unless the user chose one; returns the folder used. Torch writes its own default into the
    environment variable the first time it looks (`default_cache_dir`, /tmp/torchinductor_<user>):
    that value is not a choice, so it is replaced too."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen is None or chosen == default_cache_dir():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_file(INDUCTOR_CACHE))
    return os.environ["TORCHINDUCTOR_CACHE_DIR"]


@contextmanager
def compile_settings(on_cpu: bool) -> Iterator[None]:
    """The compiler's settings while an update is traced and compiled, patched for those calls only.

    - TorchDynamo traces autograd.grad, so the backward is in the update's graph.
    - On a CPU, Inductor stores a pointwise result read by more than two (CPU_REALIZE_READS_THRESHOLD).
    - AOTAutograd's cache takes the update's graph, which it would bypass for two of its parts: then
      every run traces and partitions the joint forward and backward again, though Inductor's code is
      cached (docs/performance.md, "Compile time"). The cache key hashes the graph Dynamo made:
      (1) a custom autograd.Function (the chunked loss, the embedding look-up) is in it with its forward
      and backward as traced subgraphs, and ours keep nothing on `ctx` but tensors and constants traced
      with them, so a changed Function is a new key (torch holds this behind a flag while it rolls it
      out); (2) bf16's autocast is entered inside the graph, and its device, dtype and on/off are
      arguments of the graph's own nodes, so they are in the key too (torch's allow-list lacks the
      two functions).
    """
    import torch._dynamo.config
    import torch._functorch.config
    import torch._inductor.config

    inductor = {"realize_reads_threshold": CPU_REALIZE_READS_THRESHOLD} if on_cpu else {}
    autocast = {f"torch.amp.autocast_mode.{name}": torch.__version__ for name in AUTOCAST_IN_GRAPH}
    inductor["unsafe_marked_cacheable_functions"] = {
        **torch._inductor.config.unsafe_marked_cacheable_functions,
        **autocast,
    }
    with (
        torch._dynamo.config.patch(trace_autograd_ops=True),
        torch._inductor.config.patch(inductor),
        torch._functorch.config.patch(autograd_cache_allow_custom_autograd_functions=True),
    ):
        yield


def mark_batch_dynamic(batch: Batch) -> None:
    """Every size of the batch symbolic, so that a new batch shape is not a new graph. `maybe_`: a
    size the graph must fix (a batch of one sentence) becomes a guard, not an error."""
    import torch._dynamo

    for tensor in (batch.src, batch.tgt_in, batch.tgt_out):
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
        torch._dynamo.maybe_mark_dynamic(tensor, 1)
    if batch.tgt_positions is not None:
        torch._dynamo.maybe_mark_dynamic(batch.tgt_positions, 0)


class CompiledUpdate:
    """The compiled passes of an update: `last_pass_and_step` (forward, backward, clipping and Adam:
    the whole update when it has one micro-batch), `backward_pass` (forward and backward only: the
    micro-batches before the last, with accum_steps > 1 or after an out-of-memory split; under
    torchrun every micro-batch) and `reduced_step` (under torchrun: the gradients summed over the
    ranks, then clipping and Adam)."""

    def __init__(
        self,
        objective: TeacherForcedLoss,
        parameters: FlatParameters,
        optimizer: Adam,
        clip_norm: float,
        autocast: Callable[[], AbstractContextManager],
        mode: str | None,
        dist: DistContext | None = None,
    ) -> None:
        self.objective, self.parameters, self.optimizer = objective, parameters, optimizer
        self.clip_norm, self.autocast = clip_norm, autocast
        self.dist = dist or DistContext()
        # Every rank starts from rank 0's weights, as DistributedDataParallel makes them where it wraps.
        for values in parameters.buffers:
            self.dist.broadcast_in_place(values)
        self.cache_dir = use_project_inductor_cache()
        import torch._dynamo  # the compiler, imported only by runs that compile
        from torch._dynamo.utils import counters

        self._counters = counters
        self._on_cpu = parameters.buffers[0].device.type == "cpu"
        self._last = torch.compile(self._last_pass_and_step, mode=mode)
        self._backward = torch.compile(self._backward_pass, mode=mode)
        self._step = torch.compile(self._step_of_the_gradients, mode=mode)
        self.compile_seconds = 0.0  # wall time of the calls that compiled a graph
        self.graphs = 0  # graphs compiled (the first of each function, then each recompile)
        self._compiled_once: set[Callable] = set()  # the functions that compiled a graph at least once

    def last_pass_and_step(
        self, batch: Batch, scale: float | torch.Tensor, earlier_loss: torch.Tensor, lr: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The update's last micro-batch, then its step: -> (loss, nll, gradient norm before
        clipping). `scale` multiplies the loss before the backward (1 / the update's tokens);
        `earlier_loss` is the summed loss of the micro-batches before (finiteness is the whole
        update's); `lr` the rate (`Adam.next_rate`). Gradients are zero after it. One process only."""
        self.parameters.gradients()  # each parameter's gradient still a view of the buffer
        return self._call(self._last, batch, self._scalar(scale), earlier_loss, self._scalar(lr))

    def backward_pass(self, batch: Batch, scale: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A micro-batch's forward and backward: its gradients added to the buffer; -> (loss, nll)."""
        return self._call(self._backward, batch, self._scalar(scale))

    def reduced_step(self, update_loss: torch.Tensor, lr: float) -> torch.Tensor:
        """Under torchrun, after every micro-batch's `backward_pass`: the gradient buffers summed over
        the ranks (each rank's loss was scaled by 1 / every rank's tokens, so the sum is the gradient
        of the mean over all of them), then the step, skipped on every rank alike where the loss of
        any rank or the summed gradient is not finite: -> the gradient norm before clipping. Gradients
        are zero after it."""
        for gradient in self.parameters.gradients():
            self.dist.sum_in_place(gradient)
        every_loss = self.dist.sum_on_device(update_loss)
        return self._call(self._step, None, every_loss, self._scalar(lr))

    def _scalar(self, value: float | torch.Tensor) -> torch.Tensor:
        """A number that changes every update, as a device tensor: as a Python number the graph would
        take it for a constant and recompile for the next one."""
        device = self.parameters.buffers[0].device
        if isinstance(value, torch.Tensor):  # under torchrun 1 / every rank's tokens, summed on the device
            return value.to(device=device, dtype=torch.float32).reshape(())
        return torch.full((), value, dtype=torch.float32, device=device)

    def _call(self, compiled: Callable, batch: Batch | None, *args: object) -> tuple[torch.Tensor, ...]:
        inputs = () if batch is None else (batch.src, batch.tgt_in, batch.tgt_out, batch.tgt_positions)
        if batch is not None:
            mark_batch_dynamic(batch)
        before, start = self._counters["stats"]["unique_graphs"], time.perf_counter()
        with compile_settings(self._on_cpu):
            result = compiled(*inputs, *args)
        new = self._counters["stats"]["unique_graphs"] - before
        if new:
            seconds = time.perf_counter() - start
            self.compile_seconds += seconds
            self.graphs += new
            first = compiled not in self._compiled_once
            self._compiled_once.add(compiled)
            if batch is None:
                what = "the step compiled"
            else:
                shape = f"batch of {batch.src.size(0)} x {batch.src.size(1)} -> {batch.tgt_in.size(1)}"
                what = (
                    f"the update compiled ({shape})"
                    if first
                    else f"recompiled at a {shape}: a guard of the graphs so far broke (TORCH_LOGS=recompiles names it)"
                )
            log.info(
                "compile: %s in %.1f s (%d graphs so far, %.1f s in all; Inductor's cache: %s)",
                what,
                seconds,
                self.graphs,
                self.compile_seconds,
                self.cache_dir,
            )
        return result

    # -- what torch.compile traces
    def _backward_pass(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        tgt_positions: torch.Tensor | None,
        scale: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with self.autocast():
            loss, nll = self.objective(src, tgt_in, tgt_out, tgt_positions)
        # Not `.backward()`: TorchDynamo writes that as autograd.grad, then the accumulations into the
        # buffer in the parameters' order, embeddings first, whose gradients are made last. The
        # accumulations are a chain (each writes the one buffer), so none could run before the
        # backward's end, and Inductor fused each weight's gradient product and bias sum into its
        # accumulation there: every layer's saved inputs and output gradients held to the end.
        gradients = torch.autograd.grad(loss * scale, self.parameters.params, allow_unused=True)
        self.parameters.accumulate(gradients)
        return loss.detach().float(), nll.detach().float()

    def _last_pass_and_step(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        tgt_out: torch.Tensor,
        tgt_positions: torch.Tensor | None,
        scale: torch.Tensor,
        earlier_loss: torch.Tensor,
        lr: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, nll = self._backward_pass(src, tgt_in, tgt_out, tgt_positions, scale)
        return loss, nll, self._step_of_the_gradients(earlier_loss + loss, lr)

    def _step_of_the_gradients(self, update_loss: torch.Tensor, lr: torch.Tensor) -> torch.Tensor:
        """As the eager update does it (update.py): the norm over the flat buffers, clipping, and Adam
        skipping itself where the update's loss or the gradient is not finite; -> the norm."""
        norm = self.parameters.gradient_norm()
        if self.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.parameters.buffers, self.clip_norm, norm, foreach=True)
        not_finite = (~(torch.isfinite(update_loss) & torch.isfinite(norm))).float()
        self.optimizer.step_in_graph(lr, not_finite)
        self.parameters.zero_grad()
        return norm
