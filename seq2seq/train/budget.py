"""A run's time budget: max_minutes counted over its restarts, the share of it a time-driven schedule
has used, and the part kept back for the final validation, so that the run ends by its deadline.

The Trainer holds one `Budget` and tells it how long updates and validations took; the clock is the
Trainer's (`Trainer.clock`), handed in, so that every figure is read on the run's one clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from seq2seq.data.pipeline import PreparedData
from seq2seq.train.distributed import DistContext
from seq2seq.train.evaluate import translated_sentences

log = logging.getLogger(__name__)


class Budget:
    def __init__(
        self,
        max_minutes: float | None,
        max_steps: int | None,
        valid_max_sentences: int | None,
        batch_tokens: int,
        dist: DistContext,
        clock: Callable[[], float],
        started: float,
    ) -> None:
        """The run's max_minutes and max_steps; valid_max_sentences and batch_tokens size a validation
        for its estimate. `started`: when the run's command started (on `clock`), so that max_minutes
        counts its set-up."""
        self.max_minutes, self.max_steps, self.dist, self.clock = max_minutes, max_steps, dist, clock
        self.valid_max_sentences, self.batch_tokens = valid_max_sentences, batch_tokens
        self.started = started
        self.elapsed_before = 0.0  # seconds spent in earlier segments of this run (from the checkpoint)
        # How long the latest validation (and its saves) took, or an estimate before the first: kept back
        # from max_minutes, so the final validation ends by the deadline instead of after it.
        self.validation_minutes = 0.0
        # The update whose weights the estimate translated, or None once a validation was timed (then
        # validation_minutes is a measurement). An untrained model's translations run to their length
        # limit, so an estimate made early is timed again, on weights that have learnt since, before
        # it stops the run.
        self.estimated_at: int | None = None
        self.probe_minutes = 0.0  # what timing the estimate took: kept back too, while it may be timed again
        self.update_seconds = 0.0  # how long the latest update took: the deadline keeps room for one more

    def minutes_since_start(self) -> float:
        """Minutes since this segment of the run started (its command, set-up included)."""
        return (self.clock() - self.started) / 60.0

    def elapsed_minutes(self) -> float:
        """Training time of this run so far, summed over its restarts: what max_minutes counts."""
        return (self.elapsed_before + self.clock() - self.started) / 60.0

    def used(self, step: int) -> float:
        """The fraction of the run's budget spent when update `step` starts: of max_steps or of
        max_minutes, whichever is nearer its end (linear_to_zero reaches zero there)."""
        used = (step - 1) / self.max_steps if self.max_steps else 0.0
        if self.max_minutes:
            fraction = self.elapsed_minutes() / max(self.training_minutes(), 1e-9)
            if self.dist.enabled:  # one learning rate on every rank, or their weights drift apart
                fraction = self.dist.sum(fraction) / self.dist.world_size
            used = max(used, fraction)
        return min(max(used, 0.0), 1.0)

    def training_minutes(self) -> float:
        """The part of max_minutes that training may use: all but the final validation's share (and,
        while that share is an estimate, the time to estimate it again)."""
        retiming = self.probe_minutes if self.estimated_at is not None else 0.0
        return self.max_minutes - self.validation_minutes - retiming

    def out_of_time(self) -> bool:
        """Another update would end past the time training may use: stopping now ends the run (final
        validation included) by max_minutes, where the machine keeps the pace it had."""
        if self.max_minutes is None:
            return False
        return self.elapsed_minutes() + self.update_seconds / 60.0 >= self.training_minutes()

    def deadline(self) -> float | None:
        """When max_minutes runs out, on the clock, counting what earlier segments of the run spent."""
        if not self.max_minutes:
            return None
        return self.clock() + (self.max_minutes - self.elapsed_minutes()) * 60

    def validation_timed(self, minutes: float) -> None:
        """A validation (and its saves) took `minutes`: the final one is kept that much."""
        self.validation_minutes, self.estimated_at = minutes, None

    def reserve_for_the_final_validation(
        self, translate: Callable[[list[str]], object], data: PreparedData, step: int
    ) -> None:
        """With max_minutes and no validation timed yet, rank 0 keeps back an estimate of the final
        validation's time: after the first update (whose time the estimate uses), and again when
        that estimate would stop the run and the weights have since made as many updates again (an
        estimate on untrained weights errs long: their translations run to the length limit)."""
        if not self.max_minutes or not self.dist.is_main:
            return
        first = self.validation_minutes == 0.0 and self.estimated_at is None
        stale = self.estimated_at is not None and step >= 2 * self.estimated_at and self.out_of_time()
        if not (first or stale):
            return
        was = self.validation_minutes
        self.validation_minutes, self.estimated_at = self.estimate_validation_minutes(translate, data), step
        if first:
            log.info(
                "max_minutes=%g: %.1f minutes kept for the final validation (estimated before the first)",
                self.max_minutes,
                self.validation_minutes,
            )
        else:
            log.info(
                "max_minutes=%g: the final validation timed again at update %d: %.2f minutes kept (was %.2f)",
                self.max_minutes,
                step,
                self.validation_minutes,
                was,
            )

    def estimate_validation_minutes(
        self, translate: Callable[[list[str]], object], data: PreparedData, probe_sentences: int = 16
    ) -> float:
        """What a validation will take, before the first one has: the greedy translation of
        `probe_sentences` validation sentences, timed and scaled to the sentences a validation
        translates, plus the loss pass (a forward pass, about a third of an update, per update's worth
        of tokens). An untrained model's translations run to their length limit, so this errs long."""
        valid, limit = data.valid, self.valid_max_sentences
        translated = translated_sentences(valid, limit)
        probe = valid.src_text[: min(probe_sentences, translated)]
        start = self.clock()
        translate(probe)
        self.probe_minutes = (self.clock() - start) / 60.0
        translation = self.probe_minutes * 60.0 * translated / max(len(probe), 1)
        loss_pass = self.update_seconds / 3.0 * float(valid.tgt.lengths().sum()) / self.batch_tokens
        return (translation + loss_pass) / 60.0
