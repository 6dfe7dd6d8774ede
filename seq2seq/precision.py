"""Which precision a run computes in: `precision=auto` measures it, a slow explicit choice is warned about.

No fixed default is right on every CPU: bf16 matmuls outrun fp32's where the CPU has bf16 matrix
units and fall far behind where PyTorch has no bf16 hardware path and emulates it
(docs/performance.md, "Measurements behind the code", "Precision", has the rates). So on a CPU the
choice is a measurement: a matmul of the model's own shapes in each precision, timed for
TIMED_SECONDS (longer where bf16 is emulated: MIN_CALLS slow calls), cached per machine (CPU, its ISA
level as `torch.backends.cpu.get_cpu_capability()` names it, torch version, threads) in the cache
folder, so later runs decide at once; on CPUs without bf16 instructions (`cpuinfo.has_bf16`, which the
engine choice reads too) fp32 is kept whatever a noisy measurement says. On CUDA it follows what the
GPU supports. Training and translation share this, and the benchmarks call it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from seq2seq import cpuinfo
from seq2seq.config import UserError
from seq2seq.measurement_cache import cached

log = logging.getLogger(__name__)
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# bf16 must beat fp32's matmul rate by this much to be chosen: autocast adds a cast before every
# matmul and keeps softmax, norms and the loss in fp32, so a narrow matmul win is lost in the step.
BF16_MIN_SPEEDUP = 1.25
# An explicit bf16 slower than fp32 by more than this gets a warning at start.
WARN_SLOWDOWN = 2.0
TIMED_SECONDS = 0.02  # per precision, after one untimed call that builds the kernel
MIN_CALLS = 3
# Tokens in the measured matmul: (ROWS, d_model) @ (d_model, ffn_dim), the FFN's first layer. A training
# batch has thousands; a few rows time the call's overhead more than the matmul, and can rank the two
# precisions the other way round from real updates (docs/performance.md, "Choosing the recipe").
ROWS = 1024


@dataclass(frozen=True)
class MatmulRates:
    """GFLOP/s of one matmul of the model's shapes, measured on this machine."""

    fp32: float
    bf16: float
    capability: str  # the CPU class (cpu_capability()): AMX, AVX512-BF16, AVX512, AVX2 ...

    def describe(self) -> str:
        return f"bf16 matmul {self.bf16:.3g} GFLOP/s vs fp32 {self.fp32:.3g} on this CPU ({self.capability})"


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # fp32 | bf16 | fp16: what the run computes in
    reason: str  # one line for the log: why
    warning: str | None = None  # said once at start when an explicit choice is much slower than the other


def cpu_capability() -> str:
    """The CPU class that decides bf16's speed: AMX, AVX512-BF16, AVX512, AVX2 or torch's own name.
    `torch.backends.cpu.get_cpu_capability()` says AVX512 for all three AVX-512 kinds, hence the probes."""
    probes = [("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported")]
    for name, probe in probes:
        if getattr(torch.cpu, probe, lambda: False)():
            return name
    return torch.backends.cpu.get_cpu_capability()


def measure_matmul_rates(d_model: int, ffn_dim: int) -> MatmulRates:
    """Times (ROWS, d_model) @ (d_model, ffn_dim) in fp32 and bf16 with the current thread setting."""
    return MatmulRates(
        fp32=_gflops(d_model, ffn_dim, torch.float32),
        bf16=_gflops(d_model, ffn_dim, torch.bfloat16),
        capability=cpu_capability(),
    )


def _gflops(d_model: int, ffn_dim: int, dtype: torch.dtype) -> float:
    """The rate of the fastest of at least MIN_CALLS timed calls: on a busy machine some calls wait for a
    core (a 2-thread matmul waits for both), and the fastest is the one that measured the CPU."""
    a, b = torch.randn(ROWS, d_model, dtype=dtype), torch.randn(d_model, ffn_dim, dtype=dtype)
    a @ b  # oneDNN builds the kernel for this shape on the first call: not timed
    fastest, calls, start = float("inf"), 0, time.perf_counter()
    while calls < MIN_CALLS or time.perf_counter() - start < TIMED_SECONDS:
        before = time.perf_counter()
        a @ b
        fastest = min(fastest, time.perf_counter() - before)
        calls += 1
    return 2.0 * ROWS * d_model * ffn_dim / fastest / 1e9


CACHE_NAME = "precision.json"


def _machine_key(d_model: int, ffn_dim: int) -> str:
    parts = [cpuinfo.cpu_name(), cpu_capability(), f"torch {torch.__version__}", f"{torch.get_num_threads()} threads"]
    return "|".join([*parts, f"{ROWS}x{d_model}x{ffn_dim}"])  # a measurement of other rows is not reused


def cached_matmul_rates(d_model: int, ffn_dim: int) -> MatmulRates:
    """The measurement for this machine and shape, from the cache file when it has one (a new
    measurement is slowest where bf16 is emulated)."""
    measure = lambda: measure_matmul_rates(d_model, ffn_dim)  # noqa: E731
    return cached(CACHE_NAME, _machine_key(d_model, ffn_dim), MatmulRates, measure)


def choose_precision(
    requested: str,
    device: torch.device,
    d_model: int,
    ffn_dim: int,
    rates: Callable[[int, int], MatmulRates] | None = None,
) -> PrecisionChoice:
    """What `precision=<requested>` means on `device`; `rates` measures the CPU (default: cached_matmul_rates)."""
    if requested not in PRECISIONS:
        raise UserError(f"config error: precision={requested!r}: must be one of {', '.join(PRECISIONS)}")
    if device.type == "cuda":
        return _choose_on_cuda(requested, device)
    if device.type != "cpu":
        if requested == "auto":
            return PrecisionChoice("fp32", f"auto: fp32 on {device.type}")
        return PrecisionChoice(requested, "as asked")
    if requested == "fp16":
        # The one message for training and decoding, whose auto differ (measured; fp32): neither is told here.
        raise UserError("config error: precision='fp16' needs a GPU; on a CPU use precision=auto, bf16 or fp32")
    if requested == "fp32":
        return PrecisionChoice("fp32", "as asked")
    measured = (rates or cached_matmul_rates)(d_model, ffn_dim)
    if requested == "auto":
        faster = measured.bf16 >= BF16_MIN_SPEEDUP * measured.fp32
        # Without bf16 instructions PyTorch emulates bf16: a measurement that puts it ahead is noise (a busy
        # machine slowed the fp32 calls), never a real gain.
        chosen = "bf16" if faster and cpuinfo.has_bf16() else "fp32"
        return PrecisionChoice(chosen, f"auto: {measured.describe()}")
    warning = None
    if measured.bf16 * WARN_SLOWDOWN < measured.fp32:
        warning = (
            f"precision=bf16 is {measured.fp32 / measured.bf16:.0f}x slower than fp32 here ({measured.describe()}); "
            "precision=auto or precision=fp32 runs at the faster speed"
        )
    return PrecisionChoice("bf16", f"as asked ({measured.describe()})", warning)


def _choose_on_cuda(requested: str, device: torch.device) -> PrecisionChoice:
    if requested != "auto":
        return PrecisionChoice(requested, "as asked")
    name = torch.cuda.get_device_name(device)
    if torch.cuda.is_bf16_supported():
        return PrecisionChoice("bf16", f"auto: {name} supports bf16")
    return PrecisionChoice("fp16", f"auto: {name} has no bf16; fp16 (training uses a grad scaler)")


BATCH_DEPENDENT = (
    "a sentence's translation can depend on the other sentences of its batch in {precision} (its matmuls round "
    "differently with the batch's shape); precision=auto decodes in fp32, which does not"
)


def choose_decoding_precision(
    requested: str,
    device: torch.device,
    d_model: int,
    ffn_dim: int,
    rates: Callable[[int, int], MatmulRates] | None = None,
) -> PrecisionChoice:
    """What PyTorch decodes in. Unlike training, `auto` is fp32 everywhere: half-precision matmuls
    round differently with the batch's shape, so a line's translation would change with the lines
    decoded beside it (the CLI's batches, the server's concurrent clients). bf16 and fp16 stay
    available, faster where the hardware has them, with that said once."""
    if requested == "auto":
        return PrecisionChoice("fp32", "auto: fp32 for decoding, whose lines must not depend on their batch")
    choice = choose_precision(requested, device, d_model, ffn_dim, rates)
    if choice.precision == "fp32":
        return choice
    batch_note = BATCH_DEPENDENT.format(precision=choice.precision)
    return replace(choice, warning=f"{choice.warning}; {batch_note}" if choice.warning else batch_note)


def log_choice(choice: PrecisionChoice, logger: logging.Logger = log) -> None:
    logger.info("precision: %s (%s)", choice.precision, choice.reason)
    if choice.warning:
        logger.warning(choice.warning)
