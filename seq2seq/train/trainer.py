"""The training loop: updates, validation, checkpoints, and exact resume.

The Trainer owns a run once command.py hands it over: the loop and its stop rules, the run's clock, the
step, best and patience, the final validation and save (`run`); it is handed the parts of the config
it reads (parts.py), never the config.
It composes the update (update.py), the time budget (budget.py) and what it shows (reporting.py).
Everything a run needs to continue bit-for-bit lives in its checkpoints, taken between updates only,
so a run resumed from one replays exactly what the uninterrupted run did.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from seq2seq import cpu_sharing
from seq2seq.allocator import FreeMemoryRelease
from seq2seq.artifacts.checkpoint import TrainingState, Vocabulary, save_training_state
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.data.pipeline import PreparedData
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.precision import PrecisionChoice
from seq2seq.stop_signals import stop_on_signals
from seq2seq.train.budget import Budget
from seq2seq.train.distributed import DistContext
from seq2seq.train.evaluate import score_directions, validation_loss, validation_translations, validation_translator
from seq2seq.train.parts import TrainingParts
from seq2seq.train.reporting import Report, TrainWindow
from seq2seq.train.rng import restore_rank_state, rng_state
from seq2seq.train.run_precision import resumed_precision
from seq2seq.train.update import (
    NonFiniteLoss,
    PendingUpdate,
    RepeatedOutOfMemory,
    UpdateResult,
    training_batches,
    training_update,
)

# Updates between returns of glibc's free heap pages (allocator.FreeMemoryRelease); measured in
# docs/performance.md, "Allocator".
FREE_MEMORY_EVERY = 50
log = logging.getLogger(__name__)
STOPPED_BY_SIGNAL = "stopped by signal (Ctrl-C or SIGTERM)"


class Trainer:
    clock = staticmethod(time.monotonic)  # the run's time source; tests give it a fake one

    def __init__(
        self,
        parts: TrainingParts,
        run_dir: Path,
        data: PreparedData,
        device: torch.device,
        dist: DistContext,
        started: float | None = None,
        precision: PrecisionChoice | None = None,
    ) -> None:
        """`parts`: what the run's config says of the model, the batches, the update and the loop
        (parts.TrainingParts.of). `started`: when the run's command started
        (on `clock`), so that max_minutes counts its set-up. `precision`: what the run computes in (command.py
        resolves precision=auto first, `choose_run_precision`); without it the Trainer resolves it itself."""
        self.parts, self.loop = parts, parts.loop
        self.run_dir, self.data, self.device, self.dist = run_dir, data, device, dist
        loop = parts.loop
        limits = (loop.max_minutes, loop.max_steps, loop.valid_max_sentences, loop.batch_tokens)
        self.budget = Budget(*limits, dist, self.clock, self.clock() if started is None else started)
        self.precision_asked = loop.precision  # what the user wrote: a resume logs what auto chose and why
        self.update, self.precision_choice = training_update(parts, data, device, dist, self.budget.used, precision)
        self.precision = self.precision_choice.precision  # fp32 | bf16 | fp16; the checkpoint's config records it
        self.model, self.objective = self.update.model, self.update.objective
        self.optimizer, self.scaler = self.update.optimizer, self.update.scaler
        self.stream = training_batches(parts.batches, data, device, dist)
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
        tok = data.tokenizers  # what every checkpoint records of them: translation checks the files beside it
        sizes = {"src_size": tok.src.get_vocab_size(), "tgt_size": tok.tgt.get_vocab_size(), "pad_id": PAD_ID}
        self.vocab: Vocabulary = {**sizes, "tokenizer": tok.fingerprint()}
        # On a CPU whose OpenMP threads spin long (the run started on an idle machine): one thread while
        # other work runs (cpu_sharing.py). Not in a deterministic run, whose sums must not depend on load.
        cpu = device.type == "cpu" and not loop.deterministic
        self.sharing = cpu_sharing.watch_for_sharing(torch.get_num_threads(), torch.set_num_threads) if cpu else None
        self.free_memory = FreeMemoryRelease(FREE_MEMORY_EVERY)  # glibc's heap, handed back (allocator.py)

    # ---- the checkpoint: what the run is, and how it goes on ------------------------------------
    def training_state(self, rng: list[dict[str, Any]] | None = None) -> TrainingState:
        """`rng`: every rank's RNG state, in rank order (see `save`); default this process's only."""
        return TrainingState(
            model=self.update.model_state(),
            config={**copy.deepcopy(self.loop.record), "precision": self.precision},  # a resume computes as the run did
            vocab=self.vocab,
            step=self.step,
            data=self.stream.state_dict(),
            optimizer=self.optimizer.state_dict(),
            scaler=self.scaler.state_dict(),
            rng=rng if rng is not None else [rng_state()],
            best=self.best,
            validations_since_best=self.validations_since_best,
            skipped_updates=self.skipped_updates,
            metrics=self.last_metrics,
            elapsed_seconds=self.budget.elapsed_minutes() * 60.0,
            validation_minutes=self.budget.validation_minutes,
            precision_choice={"asked": self.precision_asked, "reason": self.precision_choice.reason},
            corpus=self.data.corpus,  # a resume checks its corpus against it (seq2seq.train.resume)
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
        self.step, self.best, self.last_metrics = state.step, state.best, state.metrics
        self.validations_since_best, self.skipped_updates = state.validations_since_best, state.skipped_updates
        self.budget.elapsed_before, self.budget.validation_minutes = state.elapsed_seconds, state.validation_minutes
        restore_rank_state(state.rng, self.dist.rank, self.dist.world_size, self.loop.seed + self.dist.rank + self.step)
        self.precision_asked, self.precision_choice = resumed_precision(
            self.precision_asked, self.precision_choice, state
        )

    # ---- one update, and reading updates back ---------------------------------------------------
    def train_step(self) -> dict[str, int] | None:
        """One optimiser update over world_size x accum_steps micro-batches (update.py). Returns its
        token counts (this rank's), or None when the update was skipped for lack of memory. An update
        whose loss or gradient is not finite leaves the weights as they were; `check_updates` tells which."""
        started = self.clock()
        micro_batches = self.stream.next_update(self.dist.world_size, self.dist.rank, self.loop.accum_steps)
        update = self.update(micro_batches, self.step + 1)
        if update is None:
            self._count_oom_skip()
            return None
        self.step, self.consecutive_oom_skips = update.step, 0
        self.pending.append(update)
        if self.step % self.loop.log_every == 0:
            self.check_updates()
        self.budget.update_seconds = self.clock() - started
        return {"tgt_tokens": update.tgt_tokens, "src_tokens": update.src_tokens}

    def check_updates(self) -> list[UpdateResult]:
        """The updates since the last check, read back in one transfer. Logs each skip; raises
        NonFiniteLoss once max_skipped_updates non-finite updates came in a row (the grad scaler's own
        skips, a finite loss with overflowing fp16 gradients, end by themselves: they do not count)."""
        pending, self.pending = self.pending, []
        results = self.update.read_back(pending)
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
        if self.consecutive_skips >= self.loop.max_skipped_updates:
            raise NonFiniteLoss(
                f"{self.consecutive_skips} updates in a row had a non-finite loss or gradient "
                f"(max_skipped_updates={self.loop.max_skipped_updates}); {self._last_good_checkpoint()}"
            )

    def _count_oom_skip(self) -> None:
        self.skipped_updates += 1
        self.consecutive_oom_skips += 1
        # Without a limit a batch size that never fits would skip forever without a single update.
        if self.consecutive_oom_skips >= self.loop.max_skipped_updates:
            raise RepeatedOutOfMemory(
                f"{self.consecutive_oom_skips} updates in a row ran out of memory even with their batches split "
                f"in two (max_skipped_updates={self.loop.max_skipped_updates}); lower batch_tokens. "
                f"{self._last_good_checkpoint(capital=True)}"
            )

    def _last_good_checkpoint(self, capital: bool = False) -> str:
        """Where to go on from, for the message that stops the run: never a directory that is not there."""
        if self.files.checkpoint("last").is_file():
            return f"{'T' if capital else 't'}he last good checkpoint is in {self.files.checkpoints}"
        return f"{'N' if capital else 'n'}o checkpoint was saved yet (the first save is at update {min(self.loop.save_every, self.loop.valid_every)})"

    # ---- validation, best and patience, checkpoints -----------------------------------------------
    def validate(self) -> dict[str, float]:
        valid, autocast = self.data.valid, self.update.autocast
        metrics = validation_loss(self.objective, valid, self.loop.batch_tokens, self.device, autocast)
        results = validation_translations(self.translator, valid, self.loop.valid_max_sentences)
        metrics.update(score_directions(results))
        self.last_metrics = metrics
        # The first direction's: the one self.translator translates (the attention images use it).
        sources, hypotheses, references = next(iter(results.values()))
        self.samples = list(zip(sources, references, hypotheses, strict=True))[:3]
        return metrics

    def improved(self, metrics: dict[str, float]) -> bool:
        value = metrics[self.loop.best_metric]
        # Weights whose loss is NaN (or infinite) have diverged: never the best, whatever their BLEU,
        # and a NaN metric compares false with everything, so it would otherwise pass as a first best.
        if not math.isfinite(metrics["loss"]) or math.isnan(value):
            return False
        if self.best is None:
            return True
        return value < self.best["value"] if self.loop.best_metric == "loss" else value > self.best["value"]

    def validate_and_save(self, report: Report) -> None:
        """Validation on rank 0 (best and patience follow it), then a checkpoint from every rank."""
        loop, step = self.loop, self.step
        self.check_updates()  # a run of non-finite updates stops the run before it is validated
        started = self.clock()
        names: list[str] = []
        if self.dist.is_main:  # once, not once per rank; the others wait at the barrier
            metrics = self.validate()
            better = self.improved(metrics)
            if better:
                self.best = {"value": metrics[loop.best_metric], "step": step}
            self.validations_since_best = 0 if better else self.validations_since_best + 1
            report.validation(step, metrics, better, loop.best_metric, self.best)
            seconds = self.budget.elapsed_minutes() * 60.0 if loop.attention_images else None
            report.samples(step, self.samples, self.translator, seconds)
            periodic = [RunDir.step_name(step)] if step % loop.save_every == 0 else []
            names = ["last"] + (["best"] if better else []) + periodic
        self.dist.wait_for_main()  # before any other collective: rank 0 may have validated for a long time
        self.validations_since_best, names = self.dist.broadcast((self.validations_since_best, names))
        self.save(*names)  # every rank: each one's RNG state goes into the checkpoint
        self.budget.validation_timed((self.clock() - started) / 60.0)

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
                self.files.prune_periodic(self.loop.keep_checkpoints)
        self.dist.wait_for_main()

    # ---- the run: the loop, its stop rules, the final validation and save ------------------------
    def run(self) -> str:
        """The run from where the Trainer stands to its end: updates until a stop rule says stop (its
        reason is returned), then the final weights validated and saved, unless a signal asked to stop
        now. Rank 0 shows it on the dashboard (TensorBoard, the progress bar)."""
        loop = self.loop
        report = (
            Report.open(
                self.run_dir,
                self.step,
                loop.max_steps,
                loop.progress,
                loop.attention_images_share,
                self.budget.deadline(),
                self.clock,
            )
            if self.dist.is_main
            else Report()
        )
        with stop_on_signals(self.request_stop):
            try:
                reason = self.fit(report)
                if reason == STOPPED_BY_SIGNAL:  # the user wants out now: save, skip the final validation
                    self.save("last")
                elif self.step % loop.valid_every != 0:  # the final weights get validated and saved too
                    self.validate_and_save(report)
                if self.best is not None:  # the config as computed: precision=auto named by what it chose
                    report.hparams(
                        {**copy.deepcopy(loop.record), "precision": self.precision},
                        self.last_metrics,
                        loop.best_metric,
                    )
            finally:
                report.close(self.budget.elapsed_minutes() * 60.0)
        return reason

    def fit(self, report: Report) -> str:
        """Updates until a stop rule says stop, validating and saving on schedule; returns why it stopped.
        The train metrics come from `check_updates`, every log_every updates (and the first)."""
        loop = self.loop
        window = TrainWindow(self.clock())
        while (reason := self.stop_reason()) is None:
            update_start = self.clock()
            tokens = self.train_step()
            self.notice_other_work()
            self.free_memory.tick()
            if tokens is None:
                continue
            step = self.step
            self.budget.reserve_for_the_final_validation(self.translator.translate, self.data, step)
            if step % loop.log_every == 0 or step == 1:
                self.check_updates()
                window.results += self.take_read_back()  # with what saves read back since the last
                figures = {"lr": self.optimizer.lr, "epoch": self.stream.epoch, "skipped_updates": self.skipped_updates}
                report.window(step, window, self.clock(), **figures)
                report.corpora(step, self.stream.corpus_tally)
                window = TrainWindow(self.clock())
            report.progress(tokens["tgt_tokens"] * self.dist.world_size / max(self.clock() - update_start, 1e-9))
            if step % loop.valid_every == 0:
                self.validate_and_save(report)
            elif step % loop.save_every == 0:
                self.save("last", RunDir.step_name(step))
        report.corpora(self.step, self.stream.corpus_tally, final=True)
        return reason

    def notice_other_work(self) -> None:
        """Between updates: one thread while other work shares the CPU (cpu_sharing.SharingWatch)."""
        if self.sharing is not None and (change := self.sharing.check()):
            log.info(change)

    def request_stop(self, signum: int) -> None:
        """Ctrl-C / SIGTERM: finish the current update, save, and exit cleanly. A second one kills."""
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested, self.stop_signal = True, signum
        log.warning("stop requested (signal %d): saving a checkpoint after this update", signum)

    def stop_reason(self) -> str | None:
        """Why the run stops before another update, or None. Every rank gives the same answer."""
        loop = self.loop
        # One collective for the three flags a rank may see alone, before every update.
        flags = [self.target_reached(), self.budget.out_of_time(), self.stop_requested]
        target, late, signalled = self.dist.any_of(flags)
        if target:
            return f"reached the target {loop.target_metric} {'<=' if loop.target_metric == 'loss' else '>='} {loop.target:g}"
        if loop.max_steps and self.step >= loop.max_steps:
            return f"reached max_steps={loop.max_steps}"
        if loop.max_epochs and self.stream.epochs_done(self.dist.world_size, loop.accum_steps) >= loop.max_epochs:
            return f"finished max_epochs={loop.max_epochs}"
        if late:
            return f"used max_minutes={loop.max_minutes}"
        if signalled:
            return STOPPED_BY_SIGNAL
        if loop.patience and self.validations_since_best >= loop.patience:
            return f"no better {loop.best_metric} in {loop.patience} validations (patience)"
        return None

    def target_reached(self) -> bool:
        """The latest validation met `target` (the weights now are the ones that learnt the task)."""
        loop, value = self.loop, self.last_metrics.get(self.loop.target_metric)
        if loop.target is None or value is None:
            return False
        return value <= loop.target if loop.target_metric == "loss" else value >= loop.target
