"""compile=auto: compile the update where, its compile time paid, it makes more updates in the run's
budget than the eager update does.

Whether compiling pays is a measurement, as precision=auto's choice is: the compiled update is faster
per update by what Inductor's fusion saves, which differs with the device, the model and the batch,
and it first costs minutes of compiling on a CPU (seconds to a minute on a GPU's host). So the run
times a few eager and a few compiled updates of its own model and batches (recipe.measure_pace, as
recipe=auto times its candidates), and takes the compile time as the compiled probe's first update
less the eager one's. The rule is `compile_pays`. The measurement is kept per machine (compile.json in
the cache folder, keyed by the CPU or GPU, torch, threads, the model's shape, batch_tokens and the
precision), so later runs decide at once; they compile faster than the first did (Inductor's own cache),
so the rule's compile time is on the safe side.

The choice becomes the run's config (compile=true or false: seq2seq.train.plan.with_compile) before
the Trainer is built, and the checkpoints keep it, so a resumed run continues as it started and
measures nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from seq2seq import cpuinfo
from seq2seq.data.pipeline import PreparedData
from seq2seq.measurement_cache import cached
from seq2seq.precision import PrecisionChoice, cpu_capability
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.recipe import UPDATE_SHARE, Pace, measure_pace

log = logging.getLogger(__name__)

CACHE_NAME = "compile.json"
# Compiled must beat eager's updates in the budget by this share to be chosen: paces measured on a
# shared machine move by a few percent between probes (docs/performance.md, "Choosing the recipe"), and
# a choice inside that band would follow the noise.
MIN_GAIN = 0.05


@dataclass(frozen=True)
class CompileTimings:
    """What compile=auto measured: seconds per update eager and compiled, and the compile time."""

    eager_seconds: float
    compiled_seconds: float
    compile_seconds: float

    def describe(self) -> str:
        return (
            f"{self.compiled_seconds:.3g} s/update compiled vs {self.eager_seconds:.3g} eager, "
            f"{self.compile_seconds:.0f} s to compile"
        )


@dataclass(frozen=True)
class CompileChoice:
    compile: bool
    reason: str


def compile_pays(timings: CompileTimings, max_minutes: float | None, max_steps: int | None) -> CompileChoice:
    """The rule. With a time budget the compiled run has what is left after compiling:
    (budget - compile) / compiled pace updates against budget / eager pace (the budget's share for
    updates, as recipe=auto counts it, and at most max_steps either way). With only max_steps, the
    compiled run's time for them (compile + steps x its pace) against eager's. With neither, the faster
    update. Compiled must win by MIN_GAIN."""
    t = timings
    if max_minutes:
        budget = max_minutes * 60.0 * UPDATE_SHARE
        eager = budget / max(t.eager_seconds, 1e-9)
        compiled = max(budget - t.compile_seconds, 0.0) / max(t.compiled_seconds, 1e-9)
        if max_steps and min(eager, compiled) >= max_steps:  # both make every update: the sooner done wins
            return _by_time(t, max_steps)
        if max_steps:
            eager, compiled = min(eager, max_steps), min(compiled, max_steps)
        pays = compiled >= eager * (1.0 + MIN_GAIN)
        told = f"~{compiled:,.0f} updates compiled against ~{eager:,.0f} eager in {max_minutes:g} minutes"
        return CompileChoice(pays, f"auto: {told} ({t.describe()})")
    if max_steps:
        return _by_time(t, max_steps)
    pays = t.eager_seconds >= t.compiled_seconds * (1.0 + MIN_GAIN)
    return CompileChoice(pays, f"auto: no budget, the faster update ({t.describe()})")


def _by_time(t: CompileTimings, steps: int) -> CompileChoice:
    eager, compiled = steps * t.eager_seconds, t.compile_seconds + steps * t.compiled_seconds
    pays = eager >= compiled * (1.0 + MIN_GAIN)
    return CompileChoice(
        pays,
        f"auto: {steps:,} updates in ~{compiled / 60:.1f} minutes compiled against ~{eager / 60:.1f} eager ({t.describe()})",
    )


def _machine_key(parts: TrainingParts, device: torch.device, precision: PrecisionChoice) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpuinfo.cpu_name()} {cpu_capability()}"
    m = parts.model.config
    shape = f"d{m.d_model} ffn{m.ffn_dim} h{m.heads} {m.encoder_layers}+{m.decoder_layers} layers"
    mode = parts.update.compile_mode or "default"
    parts_of_key = [where, f"torch {torch.__version__}", f"{torch.get_num_threads()} threads", shape]
    return "|".join([*parts_of_key, f"{parts.batches.batch_tokens} tokens", precision.precision, f"mode {mode}"])


def measure_timings(
    eager: TrainingParts,
    compiled: TrainingParts,
    data: PreparedData,
    device: torch.device,
    precision: PrecisionChoice,
    clock: Callable[[], float],
    eager_pace: Pace | None = None,
) -> CompileTimings:
    """The probes of `eager` and `compiled` (the run's parts with the update eager, and compiled), both
    in `precision`; the compile time is the compiled probe's first update less the eager one's.
    `eager_pace`: the eager probe where recipe=auto has made it already (in `precision`), else made here."""
    if eager_pace is None or eager_pace.precision != precision.precision:
        eager_pace = measure_pace(eager, data, device, clock, precision)
    compiled_pace = measure_pace(compiled, data, device, clock, precision)
    compile_seconds = max(compiled_pace.first_seconds - eager_pace.first_seconds, 0.0)
    return CompileTimings(eager_pace.seconds, compiled_pace.seconds, compile_seconds)


def choose_compile(
    eager: TrainingParts,
    compiled: TrainingParts,
    data: PreparedData,
    device: torch.device,
    dist: DistContext,
    precision: PrecisionChoice,
    clock: Callable[[], float],
    eager_pace: Pace | None = None,
    measure: Callable[[], CompileTimings] | None = None,
) -> bool:
    """compile=auto's choice: whether the run compiles its update (rank 0 measures and decides; every
    rank gets its choice). `eager`, `compiled`: the run's parts both ways, as the probes train them.
    `eager_pace`: recipe=auto's timing of the eager update, where it made one. `measure`: the timing
    (default: cached per machine, `measure_timings`)."""
    choice = None
    if dist.is_main:

        def timed() -> CompileTimings:
            return measure_timings(eager, compiled, data, device, precision, clock, eager_pace)

        timings = cached(CACHE_NAME, _machine_key(eager, device, precision), CompileTimings, measure or timed)
        loop = eager.loop
        decided = compile_pays(timings, loop.max_minutes, loop.max_steps)
        log.info("compile: %s (%s)", "true" if decided.compile else "false", decided.reason)
        choice = decided.compile
    return bool(dist.broadcast(choice))
