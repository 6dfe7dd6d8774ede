"""The training loop: updates, validation, checkpoints, and exact resume.

The Trainer owns a run's state from the moment run.py hands it over: the loop and its stop rules, the
run's clock (max_minutes, the schedule, the dashboard's deadline all read `Trainer.clock`), best and
patience, the final validation and save (`run`). It reads the config and never edits it.

Everything a run needs to continue bit-for-bit lives in the checkpoint: model, optimiser, schedule,
grad scaler, update count, the data stream's (epoch, position) and every RNG. A checkpoint is taken
between updates only, so a run resumed from it replays exactly what the uninterrupted run did.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import signal
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from seq2seq import cpu_sharing
from seq2seq.artifacts.checkpoint import TrainingState, Vocabulary, load_training_state, save_training_state
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import UserError, as_dict
from seq2seq.data.batching import Batch, EpochBatches, split_batch
from seq2seq.data.pipeline import PreparedData
from seq2seq.data.prefetch import Prefetcher
from seq2seq.data.streaming import StreamingBatches
from seq2seq.data.tokenizer import PAD_ID, decoder_start_id
from seq2seq.model.transformer import build_model
from seq2seq.precision import PrecisionChoice, choose_precision
from seq2seq.train.dashboard import Dashboard
from seq2seq.train.distributed import DistContext
from seq2seq.train.evaluate import (
    describe_directions,
    score_directions,
    translated_sentences,
    validation_loss,
    validation_translations,
    validation_translator,
)
from seq2seq.train.loss import TeacherForcedLoss
from seq2seq.train.optim import build_optimizer
from seq2seq.train.rng import rng_state, set_rng_state

log = logging.getLogger(__name__)
STOPPED_BY_SIGNAL = "stopped by signal (Ctrl-C or SIGTERM)"
# Attention images of the first validation sentence only: every kind and layer of one sentence shows
# what the model attends to, at a third of three sentences' drawing time.
ATTENTION_SENTENCES = 1


@dataclasses.dataclass
class PendingUpdate:
    """An update made but not yet read back: its numbers stay on the device until `check_updates`."""

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


@dataclasses.dataclass
class TrainWindow:
    """The updates since the latest train-metrics log line."""

    started: float  # on Trainer.clock
    results: list[UpdateResult] = dataclasses.field(default_factory=list)

    def kept(self) -> list[UpdateResult]:
        return [r for r in self.results if not r.skipped]

    def tokens(self) -> float:
        return float(sum(r.tgt_tokens for r in self.kept()))

    def loss(self) -> float:
        return sum(r.loss * r.tgt_tokens for r in self.kept()) / max(self.tokens(), 1.0)

    def nll(self) -> float:
        return sum(r.nll * r.tgt_tokens for r in self.kept()) / max(self.tokens(), 1.0)


class NonFiniteLoss(UserError):
    """Too many updates in a row had a NaN/inf loss or gradient."""


class RepeatedOutOfMemory(UserError):
    """Too many updates in a row ran out of memory even with their batches split in two."""


class Trainer:
    clock = staticmethod(time.monotonic)  # the run's time source; tests give it a fake one

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: Path,
        data: PreparedData,
        device: torch.device,
        dist: DistContext,
        started: float | None = None,
        precision: PrecisionChoice | None = None,
    ) -> None:
        """`started`: when the run's command started (on `clock`), so that max_minutes counts its set-up.
        `precision`: what the run computes in (run.py resolves precision=auto first, `choose_run_precision`);
        without it the Trainer resolves cfg.precision itself. The Trainer never edits the config."""
        self.cfg, self.run_dir, self.data, self.device, self.dist = cfg, run_dir, data, device, dist
        tok = data.tokenizers
        self.model = build_model(cfg.model, tok.src.get_vocab_size(), tok.tgt.get_vocab_size(), PAD_ID).to(device)
        self.objective = TeacherForcedLoss(self.model, cfg.label_smoothing, cfg.rdrop_alpha)  # validation: eval()
        self.training_objective = self._wrap_for_training(self.objective)
        # The run's clock: max_minutes and a time-driven schedule count training time summed over restarts.
        self.elapsed_before = 0.0  # seconds spent in earlier segments of this run (from the checkpoint)
        self.started = self.clock() if started is None else started
        # How long the latest validation (and its saves) took, or an estimate before the first: kept back
        # from max_minutes, so the final validation ends by the deadline instead of after it.
        self.validation_minutes = 0.0
        self.update_seconds = 0.0  # how long the latest update took: the deadline keeps room for one more
        self.optimizer = build_optimizer(self.model.parameters(), cfg.optim, cfg.model.d_model, self.budget_used)
        self.precision_asked = cfg.precision  # what the user wrote: a resume logs what auto chose and why
        self.precision_choice = precision or choose_run_precision(cfg, device, dist)
        self.precision = self.precision_choice.precision  # fp32 | bf16 | fp16; the checkpoint's config records it
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision == "fp16")
        self.stream = self._batch_stream(cfg, data, device, dist)
        self.translator = validation_translator(self.model, data, device)
        self.step = 0
        self.best: dict[str, float] | None = None  # {"value", "step"} of best_metric
        self.validations_since_best = 0
        self.skipped_updates = 0  # for any reason: non-finite loss or gradient, out of memory
        self.consecutive_skips = 0  # non-finite ones only (see _count_non_finite_skip)
        self.consecutive_oom_skips = 0
        self.last_metrics: dict[str, float] = {}
        self.pending: list[PendingUpdate] = []  # updates not yet read back (check_updates)
        self.read_back: list[UpdateResult] = []  # read back, not yet taken by the log (take_read_back)
        self.samples: list[tuple[str, str, str]] = []  # (source, reference, translation) shown in TensorBoard
        self.stop_requested = False
        self.stop_signal: int | None = None  # SIGINT or SIGTERM: the command then exits with 128 + it
        self.files = RunDir(run_dir)  # where its checkpoints go
        # On a CPU whose OpenMP threads spin long (the run started on an idle machine): one thread while
        # other work runs (cpu_sharing.py). Not in a deterministic run, whose sums must not depend on load.
        self.sharing = (
            cpu_sharing.watch_for_sharing(torch.get_num_threads(), torch.set_num_threads)
            if device.type == "cpu" and not cfg.deterministic
            else None
        )
        self.tokenizer_fingerprint = data.tokenizers.fingerprint()

    # ---- set-up -------------------------------------------------------------------------------
    @staticmethod
    def _batch_stream(cfg: DictConfig, data: PreparedData, device: torch.device, dist: DistContext) -> Any:
        """The training batches. On a GPU made one update ahead on a thread (on a CPU the thread would
        take a core from the update). Widths are padded to multiples of 8 where compiled code runs on a
        GPU (few shapes to compile for); elsewhere padding is compute spent on nothing: Multi30k's
        short sentences gain about a quarter in tokens (docs/performance.md)."""
        start = decoder_start_id(cfg.model.decoder_start)
        multiple = cfg.pad_to_multiple or (8 if device.type == "cuda" and cfg.compile else 1)
        args = (cfg.batch_tokens, cfg.seed, cfg.model.max_positions, start, multiple)
        stream = (
            StreamingBatches(cfg.data, data.tokenizers, *args)
            if cfg.data.streaming
            else EpochBatches(data.train, *args)
        )
        if device.type == "cuda":
            return Prefetcher(stream, device, dist.world_size, dist.rank, cfg.accum_steps)
        return stream

    def _wrap_for_training(self, objective: TeacherForcedLoss) -> torch.nn.Module:
        """`objective` as train_step calls it: in DistributedDataParallel under torchrun (gradients
        all-reduced), compiled with compile=true, else itself. Its parameters are the model's."""
        module: torch.nn.Module = objective
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            module = torch.nn.parallel.DistributedDataParallel(objective, device_ids=ids)
        if self.cfg.compile:
            objective.run_loss_eagerly()
            mode = None if self.cfg.compile_mode == "default" else self.cfg.compile_mode
            module = torch.compile(module, dynamic=True, mode=mode)
        return module

    def minutes_since_start(self) -> float:
        """Minutes since this segment of the run started (its command, set-up included)."""
        return (self.clock() - self.started) / 60.0

    def elapsed_minutes(self) -> float:
        """Training time of this run so far, summed over its restarts: what max_minutes counts."""
        return (self.elapsed_before + self.clock() - self.started) / 60.0

    def budget_used(self, step: int) -> float:
        """The fraction of the run's budget spent when update `step` starts: of max_steps or of
        max_minutes, whichever is nearer its end (linear_to_zero reaches zero there)."""
        used = (step - 1) / self.cfg.max_steps if self.cfg.max_steps else 0.0
        if self.cfg.max_minutes:
            fraction = self.elapsed_minutes() / max(self.training_minutes(), 1e-9)
            if self.dist.enabled:  # one learning rate on every rank, or their weights drift apart
                fraction = self.dist.sum(fraction) / self.dist.world_size
            used = max(used, fraction)
        return min(max(used, 0.0), 1.0)

    def training_minutes(self) -> float:
        """The part of max_minutes that training may use: all but the final validation's share."""
        return self.cfg.max_minutes - self.validation_minutes

    def out_of_time(self) -> bool:
        """Another update would end past the time training may use: stopping now ends the run (final
        validation included) by max_minutes, where the machine keeps the pace it had."""
        if self.cfg.max_minutes is None:
            return False
        return self.elapsed_minutes() + self.update_seconds / 60.0 >= self.training_minutes()

    def reserve_for_the_final_validation(self) -> None:
        """With max_minutes and no validation timed yet (after the first update, whose time the
        estimate uses): keep back an estimate of the final validation's time. Rank 0 validates."""
        if not self.cfg.max_minutes or self.validation_minutes != 0.0 or not self.dist.is_main:
            return
        self.validation_minutes = self.estimate_validation_minutes()
        log.info(
            "max_minutes=%g: %.1f minutes kept for the final validation (estimated before the first)",
            self.cfg.max_minutes,
            self.validation_minutes,
        )

    def estimate_validation_minutes(self, probe_sentences: int = 16) -> float:
        """What a validation will take, before the first one has: the greedy translation of
        `probe_sentences` validation sentences, timed and scaled to the sentences a validation
        translates, plus the loss pass (a forward pass, about a third of an update, per update's worth
        of tokens). An untrained model's translations run to their length limit, so this errs long."""
        valid, limit = self.data.valid, self.cfg.valid_max_sentences
        translated = translated_sentences(valid, limit)
        probe = valid.src_text[: min(probe_sentences, translated)]
        start = self.clock()
        self.translator.translate(probe)
        translation = (self.clock() - start) * translated / max(len(probe), 1)
        loss_pass = self.update_seconds / 3.0 * float(valid.tgt.lengths().sum()) / self.cfg.batch_tokens
        return (translation + loss_pass) / 60.0

    def autocast(self) -> AbstractContextManager:
        if self.precision == "fp32":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def state_dict_vocab(self) -> Vocabulary:
        return {
            "src_size": self.data.tokenizers.src.get_vocab_size(),
            "tgt_size": self.data.tokenizers.tgt.get_vocab_size(),
            "pad_id": PAD_ID,
            "tokenizer": self.tokenizer_fingerprint,  # translation checks that the tokenizer beside it is this one
        }

    def training_state(self, rng: list[dict[str, Any]] | None = None) -> TrainingState:
        """`rng`: every rank's RNG state, in rank order (see `save`); default this process's only."""
        return TrainingState(
            model=self.model.state_dict(),
            config={**as_dict(self.cfg), "precision": self.precision},  # a resume computes as the run did
            vocab=self.state_dict_vocab(),
            step=self.step,
            data=self.stream.state_dict(),
            optimizer=self.optimizer.state_dict(),
            scaler=self.scaler.state_dict(),
            rng=rng if rng is not None else [rng_state()],
            best=self.best,
            validations_since_best=self.validations_since_best,
            skipped_updates=self.skipped_updates,
            metrics=self.last_metrics,
            elapsed_seconds=self.elapsed_minutes() * 60.0,
            validation_minutes=self.validation_minutes,
            precision_choice={"asked": self.precision_asked, "reason": self.precision_choice.reason},
        )

    def restore(self, state: TrainingState) -> None:
        """Continue exactly where `state` (a checkpoint of this run) left off."""
        self.model.load_state_dict(state.model)
        self.optimizer.load_state_dict(state.optimizer)
        if self.scaler.is_enabled() and not state.scaler:  # the run was not fp16 until now
            log.warning("the checkpoint has no grad scaler state (not trained with fp16): starting a fresh one")
        else:
            self.scaler.load_state_dict(state.scaler)
        self.stream.load_state_dict(state.data)
        self.step = state.step
        self.best = state.best
        self.validations_since_best = state.validations_since_best
        self.skipped_updates = state.skipped_updates
        self.last_metrics = state.metrics
        self.elapsed_before = state.elapsed_seconds
        self.validation_minutes = state.validation_minutes
        self._restore_rng(state.rng)
        self._describe_resumed_precision(state)

    def _describe_resumed_precision(self, state: TrainingState) -> None:
        """A resumed run computes in the precision its config recorded, which for precision=auto is what
        auto chose at the run's start: the log says so, not "as asked" (no one asked for it)."""
        if self.precision != state.config["precision"]:
            return  # changed on the resume's command line: chosen now, as logged
        saved = state.precision_choice
        if saved is None:
            reason = "as the run's checkpoint recorded it"
        elif saved["asked"] != self.precision:
            self.precision_asked = saved["asked"]
            reason = f"precision={saved['asked']} chose it when the run started: {saved['reason']}"
        else:
            return
        self.precision_choice = dataclasses.replace(self.precision_choice, reason=f"resumed; {reason}")

    def _restore_rng(self, states: list[dict[str, Any]]) -> None:
        """Each rank continues its own random streams (dropout masks differ between ranks)."""
        rank, world_size = self.dist.rank, self.dist.world_size
        if len(states) != world_size:
            log.warning(
                "the checkpoint has the random state of %d rank(s), this run has %d: ranks without one start "
                "from seed+rank+update, so the run is not bit-exact from here",
                len(states),
                world_size,
            )
        if rank < len(states):
            set_rng_state(states[rank])
        else:
            seed = self.cfg.seed + rank + self.step
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)

    # ---- one update -------------------------------------------------------------------------
    # train_step reads as its parts: gradients (with the out-of-memory retry), the grad scaler's
    # unscaling and clipping, and the update, which the device itself skips when the loss or the
    # gradient is not finite. Nothing in it reads a value back from the device, so a GPU's queue never
    # drains between updates: the losses, norms and skips are read back together every log_every
    # updates, and before a validation or a save (`check_updates`). Collectives run in the same
    # order on every rank, whatever path the update takes.
    def train_step(self) -> dict[str, int] | None:
        """One optimiser update over world_size x accum_steps micro-batches. Returns its token counts
        (this rank's), or None when the update was skipped for lack of memory. An update whose loss or
        gradient is not finite leaves the weights as they were; `check_updates` tells which."""
        self.training_objective.train()
        started = self.clock()
        micro_batches = self.stream.next_update(self.dist.world_size, self.dist.rank, self.cfg.accum_steps)
        sums = self._gradients(micro_batches)
        if sums is None:
            return None
        loss_sum, nll_sum = sums
        grad_norm = self._unscale_and_clip()
        not_finite = self._not_finite_on_any_rank(loss_sum, grad_norm)
        self._apply_update(not_finite)
        update = PendingUpdate(
            self.step,
            torch.stack([loss_sum, nll_sum, grad_norm.to(loss_sum)]),
            sum(b.tgt_tokens for b in micro_batches),
            sum(b.src_tokens for b in micro_batches),
        )
        self.pending.append(update)
        if self.step % self.cfg.log_every == 0:
            self.check_updates()
        self.update_seconds = self.clock() - started
        return {"tgt_tokens": update.tgt_tokens, "src_tokens": update.src_tokens}

    # -- gradients, and the out-of-memory retry
    def _gradients(self, micro_batches: list[Batch]) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Gradients of the update summed in the parameters' .grad; returns the summed (loss, nll) as
        device scalars, or None when the update is skipped for lack of memory.

        Out of memory in a single process: the update is redone once from zero gradients with every
        micro-batch split in two (same sentences, same normalisation, so the same update up to float
        rounding), and skipped if that runs out of memory too. Under DDP it is an error instead, since
        a rank that splits makes more backward passes (and all-reduces) than the others wait for."""
        local_tokens = sum(b.tgt_tokens for b in micro_batches)
        total_tokens = self._tokens_on_every_rank(local_tokens)
        sums = self._accumulate(micro_batches, total_tokens)
        if sums is not None:
            return sums
        # Retried here, not inside the except clause: until it is left, the exception's traceback
        # keeps the failed pass's activations alive.
        self._free_after_oom()
        halves = [half for batch in micro_batches for half in split_batch(batch)]
        sentences = sum(len(b.indices) for b in micro_batches)
        log.warning(
            "update %d ran out of memory (%d sentences, %d target tokens): retrying it in %d micro-batches",
            self.step + 1,
            sentences,
            local_tokens,
            len(halves),
        )
        sums = self._accumulate(halves, total_tokens)
        if sums is None:
            self._free_after_oom()
            self._count_oom_skip(sentences, local_tokens)
        return sums

    def _tokens_on_every_rank(self, local_tokens: int) -> float | torch.Tensor:
        """The update's target tokens over all ranks: a number in one process; under DDP a device
        tensor all-reduced in the queue (a number would wait for every rank's answer on the host)."""
        if not self.dist.enabled:
            return float(local_tokens)
        return self.dist.sum_on_device(torch.full((), float(local_tokens), device=self.device))

    def _accumulate(
        self, micro_batches: list[Batch], total_tokens: float | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Forward and backward over every micro-batch, gradients summed. Returns the summed (loss,
        nll), or None when one of them ran out of memory (gradients are then partial)."""
        loss_sum = nll_sum = torch.zeros((), device=self.device)
        try:
            for i, batch in enumerate(micro_batches):
                # DDP: all-reduce gradients only on the last micro-batch of the update.
                last = i == len(micro_batches) - 1
                sync = nullcontext() if last or not self.dist.enabled else self.training_objective.no_sync()
                with sync:
                    loss, nll = self._forward_backward(batch.to(self.device), total_tokens)
                loss_sum, nll_sum = loss_sum + loss, nll_sum + nll
        except torch.OutOfMemoryError as err:  # torch.cuda.OutOfMemoryError is the same class
            if self.dist.enabled:
                raise UserError(
                    f"out of memory at update {self.step + 1} on rank {self.dist.rank} "
                    f"({sum(b.tgt_tokens for b in micro_batches)} target tokens); lower batch_tokens "
                    "(with several processes a batch cannot be split and retried)"
                ) from err
            return None
        return loss_sum, nll_sum

    def _forward_backward(self, batch: Batch, total_tokens: float | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with self.autocast():
            loss, nll = self.training_objective(batch.src, batch.tgt_in, batch.tgt_out, batch.tgt_positions)
        # Normalise by the tokens of the whole update on all ranks: DDP averages over ranks, so
        # multiply back by world_size; the gradient is then that of the global mean token loss.
        # The grad scaler (fp16 only; a no-op otherwise) scales the loss so that small gradients survive.
        self.scaler.scale(loss * (self.dist.world_size / total_tokens)).backward()
        return loss.detach().float(), nll.detach().float()

    def _free_after_oom(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)  # the failed pass's partial gradients
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # hand cached blocks back so the smaller batches can be placed

    # -- the grad scaler, clipping and the finiteness check, on the device
    def _unscale_and_clip(self) -> torch.Tensor:
        """The gradients back to their true scale, clipped to optim.clip_norm; returns their norm
        before clipping (inf or nan when they are not finite), as a device scalar."""
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        # torch.nn.utils.get_total_norm's sum, without its `.to(first_device)` of every per-tensor
        # norm: one operator per parameter for the host to dispatch each update, moving nothing,
        # since a model's gradients are all on one device.
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params])))
        if self.cfg.optim.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, self.cfg.optim.clip_norm, norm, foreach=True)
        return norm

    def _not_finite_on_any_rank(self, loss_sum: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
        """1.0 where this rank's or any rank's loss or gradient norm is not finite, else 0.0: one
        verdict for all ranks (they all make the update or all skip it), kept on the device."""
        return self.dist.sum_on_device((~(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))).float())

    # -- the update: made, or skipped by the device
    def _apply_update(self, not_finite: torch.Tensor) -> None:
        """Adam skips itself where `not_finite` is set; the grad scaler (fp16) lowers its scale where
        its own check found overflowing gradients. Either way the update's number is used."""
        self.optimizer.step(found_inf=not_finite)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.consecutive_oom_skips = 0

    # -- reading the updates back: one transfer for all updates since the last
    def check_updates(self) -> list[UpdateResult]:
        """The updates since the last check, read back from the device in one transfer (under DDP,
        summed over ranks first): their loss, nll and gradient norm, and whether each was skipped as
        not finite. Logs each skip; raises NonFiniteLoss once max_skipped_updates non-finite updates
        came in a row (the grad scaler's own skips, a finite loss with overflowing fp16 gradients,
        lower its scale and end by themselves, so they do not count toward it)."""
        pending, self.pending = self.pending, []
        if not pending:
            return []
        values = torch.stack([p.values for p in pending])  # (n, 3): loss sum, nll sum, grad norm
        tokens = [[p.tgt_tokens, p.src_tokens] for p in pending]
        if self.dist.enabled:  # loss, nll and tokens summed over ranks; the norm is the same on every rank
            local = torch.tensor(tokens, dtype=values.dtype, device=values.device)
            sums = self.dist.sum_on_device(torch.cat([values[:, :2], local], dim=1))
            values, tokens = torch.cat([sums[:, :2], values[:, 2:]], dim=1), sums[:, 2:].tolist()
        results = [
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
        self.read_back += results
        for result in results:
            if result.skipped:
                self._count_non_finite_skip(result)
            else:
                self.consecutive_skips = 0
        return results

    def take_read_back(self) -> list[UpdateResult]:
        """The updates read back since the last call (by check_updates, wherever it was called)."""
        taken, self.read_back = self.read_back, []
        return taken

    def _count_non_finite_skip(self, update: UpdateResult) -> None:
        self.skipped_updates += 1
        log.warning("update %d skipped: loss=%s grad_norm=%s (not finite)", update.step, update.loss, update.grad_norm)
        if self.scaler.is_enabled() and math.isfinite(update.loss):
            return  # the grad scaler's business
        self.consecutive_skips += 1
        if self.consecutive_skips >= self.cfg.max_skipped_updates:
            raise NonFiniteLoss(
                f"{self.consecutive_skips} updates in a row had a non-finite loss or gradient "
                f"(max_skipped_updates={self.cfg.max_skipped_updates}); {self._last_good_checkpoint()}"
            )

    def _last_good_checkpoint(self, capital: bool = False) -> str:
        """Where to go on from, for the message that stops the run: never a directory that is not there."""
        if self.files.checkpoint("last").is_file():
            return f"{'T' if capital else 't'}he last good checkpoint is in {self.files.checkpoints}"
        return f"{'N' if capital else 'n'}o checkpoint was saved yet (the first save is at update {min(self.cfg.save_every, self.cfg.valid_every)})"

    def _count_oom_skip(self, sentences: int, tokens: int) -> None:
        self.skipped_updates += 1
        self.consecutive_oom_skips += 1
        log.warning(
            "update %d skipped: out of memory even with its batches split in two (%d sentences, %d target tokens)",
            self.step + 1,
            sentences,
            tokens,
        )
        # Without a limit a batch size that never fits would skip forever without a single update.
        if self.consecutive_oom_skips >= self.cfg.max_skipped_updates:
            raise RepeatedOutOfMemory(
                f"{self.consecutive_oom_skips} updates in a row ran out of memory even with their batches split "
                f"in two (max_skipped_updates={self.cfg.max_skipped_updates}); lower batch_tokens. "
                f"{self._last_good_checkpoint(capital=True)}"
            )

    # ---- validation ---------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        metrics = validation_loss(self.objective, self.data.valid, self.cfg.batch_tokens, self.device, self.autocast)
        results = validation_translations(self.translator, self.data.valid, self.cfg.valid_max_sentences)
        metrics.update(score_directions(results))
        self.last_metrics = metrics
        # The first direction's: the one self.translator translates (the attention images use it).
        sources, hypotheses, references = next(iter(results.values()))
        self.samples = list(zip(sources, references, hypotheses, strict=True))[:3]
        return metrics

    def improved(self, metrics: dict[str, float]) -> bool:
        value = metrics[self.cfg.best_metric]
        # Weights whose loss is NaN (or infinite) have diverged: never the best, whatever their BLEU,
        # and a NaN metric compares false with everything, so it would otherwise pass as a first best.
        if not math.isfinite(metrics["loss"]) or math.isnan(value):
            return False
        if self.best is None:
            return True
        return value < self.best["value"] if self.cfg.best_metric == "loss" else value > self.best["value"]

    # ---- checkpoints --------------------------------------------------------------------------
    def save(self, *names: str) -> None:
        """Under DDP every rank calls this: the checkpoint holds each rank's RNG state; rank 0 writes
        it while the others wait (on the long-timeout barrier: a big checkpoint can take a while)."""
        self.check_updates()  # the skips counted, and a run of non-finite updates stopped, before saving
        states = self.dist.gather(rng_state())
        if self.dist.is_main:
            state = self.training_state(states)
            # last.pt goes last: a process killed part-way through leaves the previous last.pt, so a
            # resume replays this update and writes the best and periodic checkpoints it owed.
            for name in sorted(names, key=lambda n: n == "last"):
                save_training_state(state, self.files.checkpoint(name))
            if any(RunDir.step_of(name) is not None for name in names):
                periodic = self.files.periodic_checkpoints()
                for old in periodic[: max(len(periodic) - self.cfg.keep_checkpoints, 0)]:
                    old.unlink(missing_ok=True)
        self.dist.wait_for_main()

    # ---- the run: the loop, its stop rules, the final validation and save ------------------------
    def run(self) -> str:
        """The run from where the Trainer stands to its end: updates until a stop rule says stop (its
        reason is returned), then the final weights validated and saved, unless a signal asked to stop
        now. Rank 0 shows it on the dashboard (TensorBoard, the progress bar)."""
        cfg = self.cfg
        dashboard = self._open_dashboard() if self.dist.is_main else None
        install_stop_handlers(self)
        try:
            reason = self.fit(dashboard)
            if reason == STOPPED_BY_SIGNAL:  # the user wants out now: save, skip the final validation
                self.save("last")
            elif self.step % cfg.valid_every != 0:  # the final weights get validated and saved too
                self.validate_and_save(dashboard)
            if dashboard is not None and self.best is not None:
                # The config as computed: precision=auto named by what it chose, as the checkpoints do.
                dashboard.hparams({**as_dict(cfg), "precision": self.precision}, self._metric_tags())
        finally:
            if dashboard is not None:
                self._close_dashboard(dashboard)
        return reason

    def _open_dashboard(self) -> Dashboard:
        cfg = self.cfg
        # When max_minutes runs out, counting what earlier segments of a resumed run spent.
        deadline = self.clock() + (cfg.max_minutes - self.elapsed_minutes()) * 60 if cfg.max_minutes else None
        return Dashboard(
            self.run_dir,
            self.step,
            cfg.max_steps,
            cfg.progress,
            deadline,
            cfg.attention_images_share,
            clock=self.clock,
        )

    def _close_dashboard(self, dashboard: Dashboard) -> None:
        dashboard.close()
        if dashboard.attention_draws:
            log.info(
                "attention images: %d at %d of the validations, %.1f s of drawing, %.2f%% of the training time",
                dashboard.attention_images,
                dashboard.attention_draws,
                dashboard.attention_seconds,
                100 * dashboard.attention_seconds / max(self.elapsed_minutes() * 60.0, 1e-9),
            )

    def _metric_tags(self) -> list[str]:
        """The HParams tab's metrics: the validation tags the run writes; their last points are the final
        weights' scores and the best so far."""
        return [*(f"valid/{k}" for k in self.last_metrics), f"valid/best_{self.cfg.best_metric}"]

    def fit(self, dashboard: Dashboard | None) -> str:
        """Updates until a stop rule says stop, validating and saving on schedule; returns why it stopped.
        The train metrics come from `check_updates`, every log_every updates (and the first)."""
        cfg = self.cfg
        window = TrainWindow(self.clock())
        shown: dict[str, str] = {}  # the bar's loss and lr, as of the latest read-back
        while (reason := self.stop_reason()) is None:
            update_start = self.clock()
            tokens = self.train_step()
            self.notice_other_work()
            if tokens is None:
                continue
            step = self.step
            self.reserve_for_the_final_validation()
            if step % cfg.log_every == 0 or step == 1:
                self.check_updates()
                window.results += self.take_read_back()  # with what saves read back since the last
                if dashboard is not None and window.kept():
                    dashboard.scalars(step, self._train_scalars(window))
                    shown = {"loss": f"{window.loss():.3f}", "lr": f"{self.optimizer.lr:.2e}"}
                window = TrainWindow(self.clock())
            if dashboard is not None:  # every update: the bar moves at least every few seconds
                tok_s = tokens["tgt_tokens"] * self.dist.world_size / max(self.clock() - update_start, 1e-9)
                dashboard.progress(1, **shown, tok_s=f"{tok_s:,.0f}")
            if step % cfg.valid_every == 0:
                self.validate_and_save(dashboard)
            elif step % cfg.save_every == 0:
                self.save("last", RunDir.step_name(step))
        return reason

    def _train_scalars(self, window: TrainWindow) -> dict[str, float]:
        return {
            "train/loss": window.loss(),
            "train/ppl": float(np.exp(min(window.nll(), 50.0))),
            "train/lr": self.optimizer.lr,
            "train/grad_norm": window.kept()[-1].grad_norm,
            "train/tgt_tokens_per_s": window.tokens() / max(self.clock() - window.started, 1e-9),
            "train/epoch": self.stream.epoch,
            "train/skipped_updates": self.skipped_updates,
        }

    def notice_other_work(self) -> None:
        """Between updates: one thread while other work shares the CPU (cpu_sharing.SharingWatch)."""
        if self.sharing is not None and (change := self.sharing.check()):
            log.info(change)

    def stop_reason(self) -> str | None:
        """Why the run stops before another update, or None. Every rank gives the same answer."""
        cfg = self.cfg
        # One collective for the three flags a rank may see alone, before every update.
        target, late, signalled = self.dist.any_of([self.target_reached(), self.out_of_time(), self.stop_requested])
        if target:
            return (
                f"reached the target {cfg.target_metric} {'<=' if cfg.target_metric == 'loss' else '>='} {cfg.target:g}"
            )
        if cfg.max_steps and self.step >= cfg.max_steps:
            return f"reached max_steps={cfg.max_steps}"
        if cfg.max_epochs and self.stream.epochs_done(self.dist.world_size, cfg.accum_steps) >= cfg.max_epochs:
            return f"finished max_epochs={cfg.max_epochs}"
        if late:
            return f"used max_minutes={cfg.max_minutes}"
        if signalled:
            return STOPPED_BY_SIGNAL
        if cfg.patience and self.validations_since_best >= cfg.patience:
            return f"no better {cfg.best_metric} in {cfg.patience} validations (patience)"
        return None

    def target_reached(self) -> bool:
        """The latest validation met `target` (the weights now are the ones that learnt the task)."""
        cfg, value = self.cfg, self.last_metrics.get(self.cfg.target_metric)
        if cfg.target is None or value is None:
            return False
        return value <= cfg.target if cfg.target_metric == "loss" else value >= cfg.target

    def validate_and_save(self, dashboard: Dashboard | None) -> None:
        """Validation on rank 0 (best and patience follow it), then a checkpoint from every rank."""
        cfg, step = self.cfg, self.step
        self.check_updates()  # a run of non-finite updates stops the run before it is validated
        started = self.clock()
        names: list[str] = []
        if self.dist.is_main:  # once, not once per rank; the others wait at the barrier
            metrics = self.validate()
            better = self.improved(metrics)
            if better:
                self.best = {"value": metrics[cfg.best_metric], "step": step}
                self.validations_since_best = 0
            else:
                self.validations_since_best += 1
            log.info(
                "validation at update %d: loss %.3f ppl %.2f BLEU %.2f chrF %.2f exact %.1f%%%s%s",
                step,
                metrics["loss"],
                metrics["ppl"],
                metrics["bleu"],
                metrics["chrf"],
                metrics["accuracy"],
                describe_directions(metrics),
                "  (new best)" if better else "",
            )
            self._show_validation(dashboard, metrics)
            periodic = [RunDir.step_name(step)] if step % cfg.save_every == 0 else []
            names = ["last"] + (["best"] if better else []) + periodic
        self.dist.wait_for_main()  # before any other collective: rank 0 may have validated for a long time
        self.validations_since_best, names = self.dist.broadcast((self.validations_since_best, names))
        self.save(*names)  # every rank: each one's RNG state goes into the checkpoint
        self.validation_minutes = (self.clock() - started) / 60.0

    def _show_validation(self, dashboard: Dashboard | None, metrics: dict[str, float]) -> None:
        if dashboard is None:
            return
        step, cfg = self.step, self.cfg
        dashboard.scalars(step, {f"valid/{k}": v for k, v in metrics.items()})
        dashboard.scalars(step, {f"valid/best_{cfg.best_metric}": self.best["value"]})
        table = "\n".join("| " + " | ".join(_cell(t) for t in row) + " |" for row in self.samples)
        dashboard.text(step, "valid/translations", "| source | reference | translation |\n|---|---|---|\n" + table)
        if cfg.attention_images:
            sources = [source for source, _, _ in self.samples[:ATTENTION_SENTENCES]]
            dashboard.attention(step, self.translator, sources, self.elapsed_minutes() * 60.0)


def choose_run_precision(cfg: DictConfig, device: torch.device, dist: DistContext) -> PrecisionChoice:
    """cfg.precision made concrete: precision=auto becomes what this machine runs the model fastest in.
    Ranks measure alike but could disagree when close: rank 0 decides."""
    choice = choose_precision(cfg.precision, device, cfg.model.d_model, cfg.model.ffn_dim)
    return dataclasses.replace(choice, precision=dist.broadcast(choice.precision))


def resume_state(run_dir: Path) -> TrainingState:
    return load_training_state(RunDir(run_dir).find_checkpoint(prefer=("last",)))


def install_stop_handlers(trainer: Trainer) -> None:
    """Ctrl-C / SIGTERM: finish the current update, save, and exit cleanly. A second Ctrl-C kills."""

    def request_stop(signum: int, _frame: Any) -> None:
        if trainer.stop_requested:
            signal.signal(signum, signal.SIG_DFL)
            raise KeyboardInterrupt
        trainer.stop_requested = True
        trainer.stop_signal = signum
        log.warning("stop requested (signal %d): saving a checkpoint after this update", signum)

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)


def _cell(text: str) -> str:
    """A Markdown table cell: a '|' inside a sentence would end the cell early."""
    return text.replace("|", r"\|")
