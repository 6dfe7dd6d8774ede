"""One optimiser update: the model and what updates it (the training objective, the optimiser, the grad
scaler), and the update itself: gradients (with the out-of-memory retry), the grad scaler's unscaling
and clipping, and the step, which the device itself skips when the loss or the gradient is not finite.

The Trainer makes its updates with it, and recipe=auto times candidate recipes with it, without a
Trainer. Nothing in an update reads a value back from the device, so a GPU's queue never drains between
updates: the losses, norms and skips are read back together (`read_back`) when the Trainer asks.
Collectives run in the same order on every rank, whatever path the update takes.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from seq2seq.config import UserError
from seq2seq.data.batching import Batch, EpochBatches, split_batch
from seq2seq.data.pipeline import PreparedData
from seq2seq.data.prefetch import Prefetcher
from seq2seq.data.streaming import StreamingBatches
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.model.transformer import build_model
from seq2seq.precision import PrecisionChoice
from seq2seq.train.compiled_update import CompiledUpdate
from seq2seq.train.distributed import DistContext
from seq2seq.train.flat_parameters import FlatParameters, independent_copies
from seq2seq.train.freezing import freeze
from seq2seq.train.loss import TeacherForcedLoss
from seq2seq.train.optim import build_optimizer
from seq2seq.train.parts import BatchParts, ModelParts, TrainingParts, UpdateParts
from seq2seq.train.run_precision import choose_run_precision

log = logging.getLogger(__name__)
# An update's summed loss and nll, and the gradient norm where its step was made with them (compiled).
Sums = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


class NonFiniteLoss(UserError):
    """Too many updates in a row had a NaN/inf loss or gradient (the Trainer counts what `read_back` tells)."""


class RepeatedOutOfMemory(UserError):
    """Too many updates in a row ran out of memory even with their batches split in two (the Trainer counts)."""


@dataclasses.dataclass
class PendingUpdate:
    """An update made but not yet read back: its numbers stay on the device until `read_back`."""

    step: int
    values: torch.Tensor  # (3,) on the device: summed loss, summed nll, gradient norm (this rank's sums)
    tgt_tokens: int  # this rank's
    src_tokens: int


@dataclasses.dataclass
class UpdateResult:
    """An update as read back: per-token loss and nll and token counts over all ranks."""

    step: int
    loss: float
    nll: float
    grad_norm: float
    tgt_tokens: int
    src_tokens: int
    skipped: bool  # the loss or the gradient was not finite: the weights did not move


def training_batches(batches: BatchParts, data: PreparedData, device: torch.device, dist: DistContext) -> Any:
    """The training batches `batches` describes (its widths: parts.TrainingParts.of). On a GPU made one
    update ahead on a thread (on a CPU the thread would take a core from the update)."""
    b = batches
    args = (b.batch_tokens, b.seed, b.max_positions, b.start_id, b.pad_multiple)
    stream = (
        StreamingBatches(data.plan, data.tokenizers, *args) if data.train is None else EpochBatches(data.train, *args)
    )
    if device.type == "cuda":
        return Prefetcher(stream, device, dist.world_size, dist.rank, b.accum_steps)
    return stream


def training_model(parts: ModelParts, data: PreparedData, device: torch.device) -> torch.nn.Module:
    """The model `parts` describes, for `data`'s tokenizers, freshly initialised from torch's generator,
    with the parts freeze= and trainable_top_layers= name frozen."""
    tok = data.tokenizers
    model = build_model(parts.config, tok.src.get_vocab_size(), tok.tgt.get_vocab_size(), PAD_ID).to(device)
    freeze(model, list(parts.freeze), parts.trainable_top_layers)  # before FlatParameters sees the model
    return model


def training_update(
    parts: TrainingParts,
    data: PreparedData,
    device: torch.device,
    dist: DistContext,
    budget_used: Callable[[int], float],
    precision: PrecisionChoice | None = None,
) -> tuple[Update, PrecisionChoice]:
    """A fresh model of `parts` and the Update of it, in `precision` (None: precision= of the parts,
    made concrete here): what the Trainer trains and what recipe=auto's and compile=auto's probes time,
    built the one way."""
    model = training_model(parts.model, data, device)  # first: measuring the precision draws random numbers
    if precision is None:
        shape = parts.model.config
        precision = choose_run_precision(parts.loop.precision, shape.d_model, shape.ffn_dim, device, dist)
    return Update(parts.update, model, device, dist, precision.precision, budget_used), precision


class Update:
    """`model` and what updates it; one update of it per call."""

    def __init__(
        self,
        parts: UpdateParts,
        model: torch.nn.Module,
        device: torch.device,
        dist: DistContext,
        precision: str,
        budget_used: Callable[[int], float],
    ) -> None:
        """`precision`: fp32 | bf16 | fp16; `budget_used`: the schedule's share of the run spent at a step."""
        self.parts, self.model, self.device, self.dist, self.precision = parts, model, device, dist, precision
        # First: DDP and the compiler must see the parameters as they will stay, views of the buffers.
        self.parameters = FlatParameters(model.parameters())
        self.objective = TeacherForcedLoss(self.model, parts.label_smoothing, parts.rdrop_alpha)  # validation: eval()
        self.optimizer = build_optimizer(self.parameters, parts.optim, parts.d_model, budget_used)
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.compiled = self._compiled_update()
        self.training_objective = self._wrap_for_training(self.objective)

    def model_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict for a checkpoint: each tensor its own copy, not a view of the flat
        buffer (saved as views, all would share one storage: a tensor taken from the checkpoint would
        carry the whole buffer, and safetensors refuses tensors that share memory)."""
        return independent_copies(self.model.state_dict())

    def _compiled_update(self) -> CompiledUpdate | None:
        """compile=true without the grad scaler: the whole update compiled (compiled_update.py; under
        torchrun its passes and its step, the gradients all-reduced between them). In fp16 the
        objective alone is (`_wrap_for_training`)."""
        if not self.parts.compiled or self.precision == "fp16":
            return None
        clip = self.parts.optim.clip_norm
        return CompiledUpdate(
            self.objective,
            self.parameters,
            self.optimizer,
            clip,
            self.autocast,
            self.parts.compile_mode,
            self.dist,
        )

    def _wrap_for_training(self, objective: TeacherForcedLoss) -> torch.nn.Module:
        """`objective` as an update calls it: in DistributedDataParallel under torchrun where the update
        is eager (gradients all-reduced), compiled where compile=true does not compile the whole update
        (fp16), else itself. Its parameters are the model's."""
        module: torch.nn.Module = objective
        if self.dist.enabled and self.compiled is None:
            ids = [self.device.index] if self.device.type == "cuda" else None
            module = torch.nn.parallel.DistributedDataParallel(objective, device_ids=ids)
        if self.parts.compiled and self.compiled is None:
            module = torch.compile(module, dynamic=True, mode=self.parts.compile_mode)
        return module

    def autocast(self) -> AbstractContextManager:
        if self.precision == "fp32":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def __call__(self, micro_batches: list[Batch], step: int) -> PendingUpdate | None:
        """Update number `step` over `micro_batches` (this rank's world_size x accum_steps share). None
        when it was skipped for lack of memory. An update whose loss or gradient is not finite leaves
        the weights as they were; its read-back tells."""
        self.training_objective.train()
        lr = self.optimizer.next_rate()  # the compiled update's input (read once: the retry uses it too)
        sums = self._gradients(micro_batches, step, lr)
        if sums is None:
            return None
        loss_sum, nll_sum, grad_norm = sums
        if grad_norm is None:  # eager: the step follows the gradients here
            grad_norm = self._unscale_and_clip()
            self._apply(self._not_finite_on_any_rank(loss_sum, grad_norm))
        else:  # compiled: the last pass made the step
            self.optimizer.count_update(lr)
        return PendingUpdate(
            step,
            torch.stack([loss_sum, nll_sum, grad_norm.to(loss_sum)]),
            sum(b.tgt_tokens for b in micro_batches),
            sum(b.src_tokens for b in micro_batches),
        )

    # -- gradients, and the out-of-memory retry
    def _gradients(self, micro_batches: list[Batch], step: int, lr: float) -> Sums | None:
        """Gradients of the update summed in the parameters' .grad; returns the summed (loss, nll) as
        device scalars, and the gradient norm where the compiled update made its step too (`_accumulate`),
        or None when the update is skipped for lack of memory.

        Out of memory in a single process: the update is redone once from zero gradients with every
        micro-batch split in two (same sentences, same normalisation, so the same update up to float
        rounding), and skipped if that runs out of memory too. Under DDP it is an error instead, since
        a rank that splits makes more backward passes (and all-reduces) than the others wait for."""
        local_tokens = sum(b.tgt_tokens for b in micro_batches)
        total_tokens = self._tokens_on_every_rank(local_tokens)
        sums = self._accumulate(micro_batches, total_tokens, step, lr)
        if sums is not None:
            return sums
        # Retried here, not inside the except clause: until it is left, the exception's traceback
        # keeps the failed pass's activations alive.
        self._free_after_oom()
        halves = [half for batch in micro_batches for half in split_batch(batch)]
        sentences = sum(len(b.indices) for b in micro_batches)
        log.warning(
            "update %d ran out of memory (%d sentences, %d target tokens): retrying it in %d micro-batches",
            step,
            sentences,
            local_tokens,
            len(halves),
        )
        sums = self._accumulate(halves, total_tokens, step, lr)
        if sums is None:
            self._free_after_oom()
            log.warning(
                "update %d skipped: out of memory even with its batches split in two (%d sentences, %d target tokens)",
                step,
                sentences,
                local_tokens,
            )
        return sums

    def _tokens_on_every_rank(self, local_tokens: int) -> float | torch.Tensor:
        """The update's target tokens over all ranks: a number in one process; under DDP a device
        tensor all-reduced in the queue (a number would wait for every rank's answer on the host)."""
        if not self.dist.enabled:
            return float(local_tokens)
        return self.dist.sum_on_device(torch.full((), float(local_tokens), device=self.device))

    def _accumulate(
        self, micro_batches: list[Batch], total_tokens: float | torch.Tensor, step: int, lr: float
    ) -> Sums | None:
        """Forward and backward over every micro-batch, gradients summed. Returns the summed (loss,
        nll) and, compiled, the gradient norm of the step its last pass made (eager: None); None when
        one of them ran out of memory (gradients are then partial; compiled, no weight has moved: the
        step's kernels come after the backward's)."""
        loss_sum = nll_sum = torch.zeros((), device=self.device)
        grad_norm = None
        try:
            for i, batch in enumerate(micro_batches):
                # DDP: all-reduce gradients only on the last micro-batch of the update.
                last = i == len(micro_batches) - 1
                if self.compiled is not None:  # total_tokens: a number, or under torchrun a device scalar
                    batch, scale = batch.to(self.device), 1.0 / total_tokens
                    if last and not self.dist.enabled:
                        loss, nll, grad_norm = self.compiled.last_pass_and_step(batch, scale, loss_sum, lr)
                    else:
                        loss, nll = self.compiled.backward_pass(batch, scale)
                else:
                    sync = nullcontext() if last or not self.dist.enabled else self.training_objective.no_sync()
                    with sync:
                        loss, nll = self._forward_backward(batch.to(self.device), total_tokens)
                loss_sum, nll_sum = loss_sum + loss, nll_sum + nll
            if self.compiled is not None and self.dist.enabled:  # the gradients all-reduced, then the step
                grad_norm = self.compiled.reduced_step(loss_sum, lr)
        except torch.OutOfMemoryError as err:  # torch.cuda.OutOfMemoryError is the same class
            if self.dist.enabled:
                raise UserError(
                    f"out of memory at update {step} on rank {self.dist.rank} "
                    f"({sum(b.tgt_tokens for b in micro_batches)} target tokens); lower batch_tokens "
                    "(with several processes a batch cannot be split and retried)"
                ) from err
            return None
        return loss_sum, nll_sum, grad_norm

    def _forward_backward(self, batch: Batch, total_tokens: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self.autocast():
            loss, nll = self.training_objective(batch.src, batch.tgt_in, batch.tgt_out, batch.tgt_positions)
        # Normalise by the tokens of the whole update on all ranks: DDP averages over ranks, so
        # multiply back by world_size; the gradient is then that of the global mean token loss.
        # The grad scaler (fp16 only; a no-op otherwise) scales the loss so that small gradients survive.
        self.scaler.scale(loss * (self.dist.world_size / total_tokens)).backward()
        return loss.detach().float(), nll.detach().float()

    def _free_after_oom(self) -> None:
        self.optimizer.zero_grad()  # the failed pass's partial gradients
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back so the smaller batches can be placed

    # -- the grad scaler, clipping and the finiteness check, on the device
    def _unscale_and_clip(self) -> torch.Tensor:
        """The gradients back to their true scale, clipped to optim.clip_norm; returns their norm
        before clipping (inf or nan when they are not finite), as a device scalar."""
        self.scaler.unscale_(self.optimizer)
        # Over the flat gradient buffers (usually one): a few operators, not a loop over parameters.
        norm = self.parameters.gradient_norm()
        if self.parts.optim.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(
                self.parameters.buffers, self.parts.optim.clip_norm, norm, foreach=True
            )
        return norm

    def _not_finite_on_any_rank(self, loss_sum: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
        """1.0 where this rank's or any rank's loss or gradient norm is not finite, else 0.0: one
        verdict for all ranks (they all make the update or all skip it), kept on the device."""
        return self.dist.sum_on_device((~(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))).float())

    # -- the update: made, or skipped by the device
    def _apply(self, not_finite: torch.Tensor) -> None:
        """Adam skips itself where `not_finite` is set; the grad scaler (fp16) lowers its scale where
        its own check found overflowing gradients. Either way the update's number is used."""
        self.optimizer.step(found_inf=not_finite)
        self.scaler.update()
        self.optimizer.zero_grad()

    # -- reading the updates back: one transfer for all updates since the last
    def read_back(self, pending: list[PendingUpdate]) -> list[UpdateResult]:
        """`pending` read back from the device in one transfer (under DDP, summed over ranks first):
        their loss, nll and gradient norm, and whether each was skipped as not finite."""
        if not pending:
            return []
        values = torch.stack([p.values for p in pending])  # (n, 3): loss sum, nll sum, grad norm
        tokens = [[p.tgt_tokens, p.src_tokens] for p in pending]
        if self.dist.enabled:  # loss, nll and tokens summed over ranks; the norm is the same on every rank
            local = torch.tensor(tokens, dtype=values.dtype, device=values.device)
            sums = self.dist.sum_on_device(torch.cat([values[:, :2], local], dim=1))
            values, tokens = torch.cat([sums[:, :2], values[:, 2:]], dim=1), sums[:, 2:].tolist()
        return [
            UpdateResult(
                p.step,
                loss_sum / max(tgt, 1),
                nll_sum / max(tgt, 1),
                grad_norm,
                int(tgt),
                int(src),
                skipped=not (math.isfinite(loss_sum) and math.isfinite(grad_norm)),
            )
            for p, (loss_sum, nll_sum, grad_norm), (tgt, src) in zip(pending, values.tolist(), tokens, strict=True)
        ]
