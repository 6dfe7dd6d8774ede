"""recipe=auto: choose how to train from how many updates this machine will make in the budget.

A CPU with bf16 matrix units makes several times the updates of an AVX2 one in the same hour, and what
trains best differs with the number of updates: a model that is still learning at the deadline wants
to be smaller and faster, one that has long converged wants more regularisation. The experiment lists
its candidate recipes in order of preference, each with the fewest updates it needs to be the better choice
(results/sweep.md says where those numbers come from). The run times a few real updates of each
candidate on this machine, as loaded as it is now, in the precision the candidate would train in, and
takes the first that will make its minimum in what is left of the budget, else the last (max_minutes
counts from the command's start: the data's preparation and the timing itself are spent).

The timing is a measurement with an error, and a choice near a minimum would follow the noise: the
same command on the same machine could pick one recipe one day and another the next
(docs/performance.md, "Choosing the recipe"). So each candidate's pace is
the median of several timed updates, its spread is reported, and a candidate whose expected updates
straddle its minimum within that spread (a close call) is not taken: the next one is. Near a minimum the
two recipes score alike (that is what the minimum marks), so the rule only has to be the same every time.

The run's plan holds each candidate's config, its overrides applied (seq2seq.train.plan.plan_recipes);
`choose_recipe` picks one, and command.py builds the Trainer from its config, which the checkpoints keep: a
resumed run continues with the same recipe and measures nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from seq2seq.config import AUTO_RECIPE as AUTO
from seq2seq.data.pipeline import PreparedData
from seq2seq.precision import PrecisionChoice
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.rng import rng_state, set_rng_state
from seq2seq.train.update import training_batches, training_update

log = logging.getLogger(__name__)

# The share of max_minutes that goes to updates: the rest is validations, checkpoints and exports.
# What the measured 60-minute runs spent on them (results/sweep.md, "Choosing the recipe").
UPDATE_SHARE = 0.85
# Updates timed per candidate, after one untimed (the first update allocates and warms caches). The
# median of five is not moved by one update that waited for a core.
TIMED_UPDATES = 5
# The least error an estimate is given: between identical probes on an idle machine the median pace
# moves by a few percent (docs/performance.md, "Choosing the recipe"), more than one probe's own spread shows.
MIN_SPREAD = 0.05
UNLIMITED = 10**12  # the updates of a run with neither max_minutes nor max_steps


@dataclass(frozen=True)
class Pace:
    """How long a candidate's updates took in the probe, and in which precision they ran."""

    seconds: float  # the median of the timed updates
    spread: float  # half the interquartile range over the median, at least MIN_SPREAD
    precision: str
    first_seconds: float = 0.0  # the untimed first update (compiled: compiling included)

    @classmethod
    def of(cls, times: Sequence[float], precision: str) -> Pace:
        median = statistics.median(times)
        quartiles = statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1 else [median] * 3
        spread = (quartiles[2] - quartiles[0]) / 2.0 / max(median, 1e-12)
        return cls(median, max(spread, MIN_SPREAD), precision)


@dataclass(frozen=True)
class Estimate:
    """The updates a candidate will make in the budget: at its median pace, and at either end of the
    pace's spread. `pace` is None where the budget is in updates, not minutes (nothing to time)."""

    name: str
    minimum: int
    pace: Pace | None
    updates: int
    fewest: int
    most: int

    @property
    def makes_its_minimum(self) -> bool:
        """Even at the slow end of its spread: a close call does not count."""
        return self.fewest >= self.minimum

    @property
    def close_call(self) -> bool:
        return self.fewest < self.minimum <= self.most


@dataclass(frozen=True)
class Candidate:
    """One of recipes=, as the run would train with it: the run's config with the recipe's overrides
    applied, except those the command line set (the plan makes it: seq2seq.train.plan)."""

    name: str
    minimum: int  # min_updates: the fewest updates for which it is the better choice
    config: DictConfig  # recipe=name, its overrides applied
    applied: tuple[str, ...]  # the overrides applied, as key=value
    kept: tuple[str, ...]  # the keys it would set that the command line set: the user's word wins


@dataclass(frozen=True)
class RecipeChoice:
    """The recipe a run trains with, and its pace where the choice timed it (rank 0's; None elsewhere,
    and where nothing was timed): compile=auto's eager probe, already made."""

    candidate: Candidate
    pace: Pace | None = None


@dataclass(frozen=True)
class RecipePlan:
    """recipe= on a new run: the recipe asked for (auto, or a name) and every candidate of recipes=."""

    asked: str
    candidates: tuple[Candidate, ...]
    max_minutes: float | None  # the budget the choice is logged against (each candidate times its own)
    max_steps: int | None

    def named(self, name: str) -> Candidate:
        return next(candidate for candidate in self.candidates if candidate.name == name)


def measure_pace(
    parts: TrainingParts,
    data: PreparedData,
    device: torch.device,
    clock: Callable[[], float],
    precision: PrecisionChoice | None = None,
) -> Pace:
    """A few real updates of the model `parts` describe, built and made as the Trainer makes them
    (update.training_update), with no Trainer around them, each timed: the machine's pace for that
    recipe, in the precision it would train in (`precision`: this one, already chosen), under whatever
    load it has now. A recipe's probe is eager (compiling would cost more than the probe measures, and
    speeds all recipes alike); compile=auto's times the compiled update (and the eager one where
    recipe=auto has not). Leaves every random generator as it found it."""
    state = rng_state()
    try:
        dist = DistContext()
        update, precision = training_update(parts, data, device, dist, _at_the_start, precision)
        batches = training_batches(parts.batches, data, device, dist)
        times = []
        for step in range(1, TIMED_UPDATES + 2):
            start = clock()
            made = update(batches.next_update(1, 0, parts.batches.accum_steps), step)
            update.read_back([made] if made is not None else [])  # waits for the device, which finishes later
            times.append(clock() - start)
        # The first allocated and warmed caches (and compiled): not in the pace.
        return dataclasses.replace(Pace.of(times[1:], precision.precision), first_seconds=times[0])
    finally:
        set_rng_state(state)


def _at_the_start(step: int) -> float:
    """The schedule's budget for the probe's updates: at its start (their learning rate times nothing)."""
    return 0.0


def choose_recipe(
    recipes: RecipePlan,
    data: PreparedData,
    device: torch.device,
    dist: DistContext,
    clock: Callable[[], float],
    started: float | None = None,
) -> RecipeChoice:
    """The recipe to train with: auto becomes a measured choice, a name is that recipe. Rank 0 measures
    on `clock` (the run's) and decides; every rank takes its choice. `started`: when the command
    started, on `clock` (default now): max_minutes counts from there, so each candidate's updates are
    counted in what is left of it once its pace is known."""
    if recipes.asked != AUTO:
        chosen = recipes.named(recipes.asked)
        log.info("recipe: %s, as asked (%s)", chosen.name, ", ".join(chosen.applied) or "no overrides")
        return RecipeChoice(chosen)
    estimates: list[Estimate] = []
    choice, pace = None, None
    if dist.is_main:
        timing = clock()
        started = timing if started is None else started
        for candidate in recipes.candidates:
            estimates.append(_estimate(candidate, data, device, clock, started))
            if estimates[-1].makes_its_minimum:
                break  # the first that makes its minimum wins: the smaller ones need not be timed
        choice = recipes.candidates[len(estimates) - 1].name  # the one that made its minimum, else the last
        pace = estimates[-1].pace
        _log_choice(recipes, estimates, choice, clock() - timing, (clock() - started) / 60.0)
    chosen = recipes.named(dist.broadcast(choice))
    if dist.is_main:
        log.info(
            "recipe %s sets %s%s",
            chosen.name,
            ", ".join(chosen.applied) or "nothing",
            f" (kept from the command line: {', '.join(chosen.kept)})" if chosen.kept else "",
        )
    return RecipeChoice(chosen, pace)


def _estimate(
    candidate: Candidate,
    data: PreparedData,
    device: torch.device,
    clock: Callable[[], float],
    started: float,
) -> Estimate:
    """How many updates `candidate` will make: max_steps where no time budget is set, else the share
    for updates of what is left of the budget (spent from `started` up to the end of this timing) over
    the measured pace, whichever is fewer."""
    parts = TrainingParts.of(candidate.config, device, compiled=False)
    max_minutes, max_steps = parts.loop.max_minutes, parts.loop.max_steps
    if not max_minutes:
        steps = max_steps or UNLIMITED
        return Estimate(candidate.name, candidate.minimum, None, steps, steps, steps)
    pace = measure_pace(parts, data, device, clock)
    left = max(max_minutes * 60.0 - (clock() - started), 0.0)

    def updates_at(seconds: float) -> int:
        updates = int(left * UPDATE_SHARE / max(seconds, 1e-9))
        return min(updates, max_steps) if max_steps else updates

    slow, fast = pace.seconds * (1.0 + pace.spread), pace.seconds * (1.0 - pace.spread)
    return Estimate(
        candidate.name, candidate.minimum, pace, updates_at(pace.seconds), updates_at(slow), updates_at(fast)
    )


def describe(estimate: Estimate) -> str:
    """One candidate in the choice's log line: its precision, pace and spread, and expected updates."""
    if estimate.updates >= UNLIMITED:
        updates = "unlimited updates"
    elif estimate.pace is None:
        updates = f"{estimate.updates:,} updates"
    else:
        updates = f"~{estimate.updates:,} updates ({estimate.fewest:,}-{estimate.most:,})"
    pace = ""
    if estimate.pace is not None:
        p = estimate.pace
        pace = f" in {p.precision} at {p.seconds:.2f} s/update ±{p.spread:.0%}"
    return f"{estimate.name}{pace}: {updates}, wants >= {estimate.minimum:,}"


def _log_choice(
    recipes: RecipePlan, estimates: Sequence[Estimate], choice: str, probe_seconds: float, spent_minutes: float
) -> None:
    max_minutes, max_steps = recipes.max_minutes, recipes.max_steps
    budget = (
        f"{max_minutes:g} minutes ({max(max_minutes - spent_minutes, 0.0):.1f} left)"
        if max_minutes
        else f"max_steps={max_steps}"
        if max_steps
        else "no budget"
    )
    timed = f" (timed in {probe_seconds:.1f} s)" if any(e.pace for e in estimates) else ""
    log.info("recipe: %s for %s on this machine%s: %s", choice, budget, timed, "; ".join(map(describe, estimates)))
    for estimate in estimates:
        if estimate.close_call and estimate.name != choice:
            log.info(
                "recipe: close call: %s's %s-%s updates straddle its minimum %s; a close call goes to the next "
                "candidate",
                estimate.name,
                f"{estimate.fewest:,}",
                f"{estimate.most:,}",
                f"{estimate.minimum:,}",
            )
