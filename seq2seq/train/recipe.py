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

The choice is the run's config: `choose_recipe` returns a copy of the config given with `recipe` set to
the recipe's name and its overrides applied (run.py builds the Trainer from it), which the checkpoints
keep: a resumed run continues with the same recipe and measures nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import AUTO_RECIPE as AUTO
from seq2seq.config import FIXED_RECIPE as FIXED
from seq2seq.config import parse_overrides
from seq2seq.data.pipeline import PreparedData
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.rng import rng_state, set_rng_state
from seq2seq.train.run_precision import choose_run_precision
from seq2seq.train.update import Update, training_batches, training_model

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


def recipe_overrides(cfg: DictConfig, name: str) -> dict[str, str]:
    index = [r.name for r in cfg.recipes].index(name)
    return parse_overrides(cfg.recipes[index], index)


def apply_recipe(cfg: DictConfig, name: str, user_keys: set[str]) -> list[str]:
    """Sets cfg.recipe to `name` and applies its overrides, except those the user gave on the command
    line (the user's word wins). Returns the overrides applied, as key=value."""
    applied = []
    for key, value in recipe_overrides(cfg, name).items():
        if set_by_user(key, user_keys):
            continue
        # from_dotlist parses the value as the command line would (numbers, booleans, null)
        OmegaConf.update(cfg, key, OmegaConf.select(OmegaConf.from_dotlist([f"{key}={value}"]), key), merge=False)
        applied.append(f"{key}={value}")
    cfg.recipe = name
    return applied


def user_override_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys a Hydra command line sets (group choices such as model=small included)."""
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def set_by_user(key: str, user_keys: set[str]) -> bool:
    """model.dropout is the user's if the command line set model.dropout, or chose the group model=."""
    parts = key.split(".")
    return any(".".join(parts[:n]) in user_keys for n in range(1, len(parts) + 1))


def measure_pace(
    cfg: DictConfig, data: PreparedData, device: torch.device, clock: Callable[[], float], compiled: bool = False
) -> Pace:
    """A few real updates of the model `cfg` builds, made as the Trainer makes them (update.py), with
    no Trainer around them, each timed: the machine's pace for that recipe, in the precision it would
    train in, under whatever load it has now; `compiled`: with compile=true (compile=auto's probe; a
    recipe's is eager: compiling would cost more than the probe measures, and speeds all recipes
    alike). Leaves every random generator as it found it."""
    probe = copy.deepcopy(cfg)
    probe.compile = "true" if compiled else "false"
    state = rng_state()
    try:
        dist = DistContext()
        parts = TrainingParts.of(probe, device)
        model = training_model(parts.model, data, device)
        precision = choose_run_precision(
            probe.precision, probe.model.d_model, probe.model.ffn_dim, device, dist
        ).precision
        update = Update(parts.update, model, device, dist, precision, _at_the_start)
        batches = training_batches(parts.batches, data, device, dist)
        times = []
        for step in range(1, TIMED_UPDATES + 2):
            start = clock()
            made = update(batches.next_update(1, 0, parts.batches.accum_steps), step)
            update.read_back([made] if made is not None else [])  # waits for the device, which finishes later
            times.append(clock() - start)
        # The first allocated and warmed caches (and compiled): not in the pace.
        return dataclasses.replace(Pace.of(times[1:], precision), first_seconds=times[0])
    finally:
        set_rng_state(state)


def _at_the_start(step: int) -> float:
    """The schedule's budget for the probe's updates: at its start (their learning rate times nothing)."""
    return 0.0


def choose_recipe(
    cfg: DictConfig,
    overrides: Sequence[str],
    data: PreparedData,
    device: torch.device,
    dist: DistContext,
    clock: Callable[[], float],
    started: float | None = None,
) -> DictConfig:
    """The config to train with: auto becomes a measured choice, a name applies that recipe, fixed
    leaves the config as it is. Rank 0 measures on `clock` (the run's) and decides; every rank applies
    its choice. `started`: when the command started, on `clock` (default now): max_minutes counts
    from there, so each candidate's updates are counted in what is left of it once its pace is known.
    `cfg` itself is left as it was."""
    if cfg.recipe == FIXED:
        return cfg
    user_keys = user_override_keys(overrides)
    if cfg.recipe != AUTO:
        chosen = copy.deepcopy(cfg)
        applied = apply_recipe(chosen, cfg.recipe, user_keys)
        log.info("recipe: %s, as asked (%s)", cfg.recipe, ", ".join(applied) or "no overrides")
        return chosen
    estimates: list[Estimate] = []
    choice = None
    if dist.is_main:
        timing = clock()
        started = timing if started is None else started
        for recipe in cfg.recipes:
            candidate = copy.deepcopy(cfg)
            apply_recipe(candidate, recipe.name, user_keys)
            estimates.append(_estimate(candidate, recipe.min_updates, data, device, clock, started))
            if estimates[-1].makes_its_minimum:
                break  # the first that makes its minimum wins: the smaller ones need not be timed
        choice = cfg.recipes[len(estimates) - 1].name  # the one that made its minimum, else the last
        _log_choice(cfg, estimates, choice, clock() - timing, (clock() - started) / 60.0)
    choice = dist.broadcast(choice)
    chosen = copy.deepcopy(cfg)
    applied = apply_recipe(chosen, choice, user_keys)
    if dist.is_main:
        kept = sorted(key for key in recipe_overrides(cfg, choice) if set_by_user(key, user_keys))
        log.info(
            "recipe %s sets %s%s",
            choice,
            ", ".join(applied) or "nothing",
            f" (kept from the command line: {', '.join(kept)})" if kept else "",
        )
    return chosen


def _estimate(
    cfg: DictConfig,
    minimum: int,
    data: PreparedData,
    device: torch.device,
    clock: Callable[[], float],
    started: float,
) -> Estimate:
    """How many updates `cfg` will make: max_steps where no time budget is set, else the share for
    updates of what is left of the budget (spent from `started` up to the end of this timing) over
    the measured pace, whichever is fewer."""
    if not cfg.max_minutes:
        steps = cfg.max_steps or UNLIMITED
        return Estimate(cfg.recipe, minimum, None, steps, steps, steps)
    pace = measure_pace(cfg, data, device, clock)
    left = max(cfg.max_minutes * 60.0 - (clock() - started), 0.0)

    def updates_at(seconds: float) -> int:
        updates = int(left * UPDATE_SHARE / max(seconds, 1e-9))
        return min(updates, cfg.max_steps) if cfg.max_steps else updates

    slow, fast = pace.seconds * (1.0 + pace.spread), pace.seconds * (1.0 - pace.spread)
    return Estimate(cfg.recipe, minimum, pace, updates_at(pace.seconds), updates_at(slow), updates_at(fast))


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
    cfg: DictConfig, estimates: Sequence[Estimate], choice: str, probe_seconds: float, spent_minutes: float
) -> None:
    budget = (
        f"{cfg.max_minutes:g} minutes ({max(cfg.max_minutes - spent_minutes, 0.0):.1f} left)"
        if cfg.max_minutes
        else f"max_steps={cfg.max_steps}"
        if cfg.max_steps
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
