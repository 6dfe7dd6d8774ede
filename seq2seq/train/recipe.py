"""recipe=auto: choose how to train from how many updates this machine will make in the budget.

A CPU with bf16 matrix units makes several times the updates of an AVX2 one in the same hour, and what
trains best differs with the number of updates: a model that is still learning at the deadline wants
to be smaller and faster, one that has long converged wants more regularisation. The experiment lists
its candidate recipes in order of preference, each with the fewest updates it needs to be the better choice
(results/sweep.md says where those numbers come from). The run times a few real updates of each
candidate on this machine, as loaded as it is now, and takes the first that will make its minimum in
the budget, else the last.

The choice is the run's config: `choose_recipe` returns a copy of the config given with `recipe` set to
the recipe's name and its overrides applied (run.py builds the Trainer from it), which the checkpoints
keep: a resumed run continues with the same recipe and measures nothing.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from seq2seq.config import AUTO_RECIPE as AUTO
from seq2seq.config import FIXED_RECIPE as FIXED
from seq2seq.config import parse_overrides
from seq2seq.data.pipeline import PreparedData
from seq2seq.train.distributed import DistContext
from seq2seq.train.rng import rng_state, set_rng_state
from seq2seq.train.run_precision import choose_run_precision
from seq2seq.train.update import Update, training_batches, training_model

log = logging.getLogger(__name__)

# The share of max_minutes that goes to updates: the rest is validations, checkpoints and exports.
# What the measured 60-minute runs spent on them (results/sweep.md, "Choosing the recipe").
UPDATE_SHARE = 0.85
# Updates timed per candidate, after one untimed (the first update allocates and warms caches).
TIMED_UPDATES = 3
UNLIMITED = 10**12  # the updates of a run with neither max_minutes nor max_steps


@dataclass(frozen=True)
class Estimate:
    name: str
    seconds_per_update: float | None  # None: not timed (the budget is in updates, not minutes)
    updates: int


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


def seconds_per_update(cfg: DictConfig, data: PreparedData, device: torch.device, clock: Callable[[], float]) -> float:
    """A few real updates of the model `cfg` builds, made as the Trainer makes them (update.py), with
    no Trainer around them: the machine's pace for that recipe, under whatever load it has now. Leaves
    every random generator as it found it."""
    probe = copy.deepcopy(cfg)
    probe.compile = False  # compiling would cost more than the probe measures; it speeds all recipes alike
    state = rng_state()
    try:
        dist = DistContext()
        model = training_model(probe, data, device)
        precision = choose_run_precision(probe, device, dist).precision
        update = Update(probe, model, device, dist, precision, _at_the_start)
        batches = training_batches(probe, data, device, dist)
        made = [update(batches.next_update(1, 0, probe.accum_steps), 1)]
        update.read_back([m for m in made if m is not None])  # the first allocates and warms caches: untimed
        start = clock()
        made = [update(batches.next_update(1, 0, probe.accum_steps), 2 + i) for i in range(TIMED_UPDATES)]
        update.read_back([m for m in made if m is not None])  # waits for the device, which finishes later
        return (clock() - start) / TIMED_UPDATES
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
) -> DictConfig:
    """The config to train with: auto becomes a measured choice, a name applies that recipe, fixed
    leaves the config as it is. Rank 0 measures on `clock` (the run's) and decides; every rank applies
    its choice. `cfg` itself is left as it was."""
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
        minimums = [r.min_updates for r in cfg.recipes]
        for recipe in cfg.recipes:
            candidate = copy.deepcopy(cfg)
            apply_recipe(candidate, recipe.name, user_keys)
            estimates.append(_estimate(candidate, data, device, clock))
            if estimates[-1].updates >= recipe.min_updates:
                break  # the first that makes its minimum wins: the smaller ones need not be timed
        choice = cfg.recipes[len(estimates) - 1].name  # the one that made its minimum, else the last
        _log_choice(cfg, estimates, minimums, choice)
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


def _estimate(cfg: DictConfig, data: PreparedData, device: torch.device, clock: Callable[[], float]) -> Estimate:
    """How many updates `cfg` will make: max_steps where no time budget is set, else the budget's
    share for updates over the measured time of one, whichever is fewer."""
    if not cfg.max_minutes:
        return Estimate(cfg.recipe, None, cfg.max_steps or UNLIMITED)
    seconds = seconds_per_update(cfg, data, device, clock)
    updates = int(cfg.max_minutes * 60.0 * UPDATE_SHARE / max(seconds, 1e-9))
    return Estimate(cfg.recipe, seconds, min(updates, cfg.max_steps) if cfg.max_steps else updates)


def _log_choice(cfg: DictConfig, estimates: Sequence[Estimate], minimums: Sequence[int], choice: str) -> None:
    budget = (
        f"{cfg.max_minutes:g} minutes"
        if cfg.max_minutes
        else f"max_steps={cfg.max_steps}"
        if cfg.max_steps
        else "no budget"
    )
    parts = []
    for estimate, minimum in zip(estimates, minimums, strict=False):
        pace = f" at {estimate.seconds_per_update:.2f} s/update" if estimate.seconds_per_update else ""
        updates = "unlimited" if estimate.updates >= UNLIMITED else f"~{estimate.updates:,}"
        parts.append(f"{estimate.name} {updates} updates{pace} (wants >= {minimum:,})")
    log.info("recipe: %s for %s on this machine: %s", choice, budget, "; ".join(parts))
