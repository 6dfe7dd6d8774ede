"""Training throughput of the real training step on a real corpus; prints one JSON object.

    python scripts/bench_train.py --data-dir data/multi30k --model small --batch-tokens 4096
    python scripts/bench_train.py --data-dir data/multi30k --scaling 1024,2048,4096,8192
    python scripts/bench_train.py --device cuda --model base --batch-tokens 16384 --precision bf16
    python scripts/bench_train.py --device cuda --precision bf16 --runs small:8192,base:32768,big:32768

Measures steady-state target/source tokens per second (after --warmup updates), seconds per update,
real vs padded tokens per batch, peak RSS (and peak GPU memory), and model FLOPs utilisation against a
matmul peak measured in the same process; then counts what an update asks of the machine besides
arithmetic (scripts/step_profile.py): operator calls, host read-backs (per update, over log_every
updates), and on a GPU its kernels and busy time (gpu_busy_fraction: the GPU's kernel time over the
timed seconds per update); and the shapes an epoch's batches come in, padded to 1 and to 8.
Under torchrun (`torchrun --standalone --nproc_per_node 2 scripts/bench_train.py --threads 1
--batch-tokens 2048 ...`: a process a core, each with its share of the update) rank 0 prints the
report, its tokens summed over the ranks and its GEMM rate the ranks' rates measured at once, added.
Run it on an idle machine: it measures the machine as much as the code. `--counts-only` times nothing:
eager's and compile=true's operator calls, Inductor's generated kernels and the launches per update,
side by side for each model (`--runs small:4096,base:4096`), on any machine.
`--compete N` measures beside N competing jobs it starts and stops itself (scripts/competing_load.py)
after its own start: jobs that arrived while it trained (it chose how its threads wait on the machine
it found at start, seq2seq/cpu_sharing.py). scripts/bench_shared.py alternates idle and competing
rounds for training and translation, with the jobs started first or (--late) after the training.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()

import sys  # noqa: E402

from seq2seq.allocator import relaunch_with_tcmalloc  # noqa: E402

if "--system-malloc" not in sys.argv:  # measure what seq2seq-train runs on
    relaunch_with_tcmalloc("bench_train.py", __name__)

from seq2seq.startup import prepare_process  # noqa: E402

prepare_process()  # before torch loads, as seq2seq-train does

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402

import seq2seq.cli.train  # noqa: E402,F401  (registers the config schema)
from seq2seq.data.batching import make_batches, padded_width  # noqa: E402
from seq2seq.data.pipeline import prepare_data  # noqa: E402
from seq2seq.model import dropout  # noqa: E402
from seq2seq.train import loss  # noqa: E402
from seq2seq.train.distributed import DistContext, cleanup_distributed, init_distributed  # noqa: E402
from seq2seq.train.parts import TrainingParts  # noqa: E402
from seq2seq.train.trainer import Trainer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competing_load import competing_jobs  # noqa: E402
from machine import machine_info  # noqa: E402
from step_profile import (  # noqa: E402
    compiled_graphs_per_epoch,
    count_generated_kernels,
    generated_kernel_names,
    gpu_time_per_update,
    host_reads_per_update,
    operator_calls_per_update,
    peak_allocated_per_update,
    shapes_per_epoch,
)


def matmul_peak_gflops(
    seconds: float = 2.0, size: int = 1024, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> float:
    """GEMM rate of this machine (the current thread setting) or GPU, in the given precision, on
    random data (zeros run faster on a GPU than real data does)."""
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    for _ in range(3):
        a @ b
    synchronize(device)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
        if count % 10 == 0:
            synchronize(device)  # a GPU queues the calls: time what ran, not what was queued
    synchronize(device)
    return 2 * size**3 * count / (time.perf_counter() - start) / 1e9


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def flops_per_update(model: torch.nn.Module, src_tokens: float, tgt_tokens: float) -> float:
    """6 x matmul parameters x tokens (forward 2, backward 4), encoder params per source token and
    decoder params + output projection per target token; embedding look-ups are not matmuls."""
    encoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith("encoder_layers"))
    decoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith("decoder_layers"))
    output = model.output.weight.numel()
    return 6.0 * (encoder * src_tokens + (decoder + output) * tgt_tokens)


def build_trainer(
    args: argparse.Namespace, batch_tokens: int, model: str | None = None, dist: DistContext | None = None
) -> Trainer:
    overrides = [
        f"model={model or args.model}",
        "data=multi30k",
        f"data.dir={args.data_dir}",
        f"data.vocab_size={args.vocab}",
        f"batch_tokens={batch_tokens}",
        f"threads={args.threads}",
        f"compile={str(args.compile).lower()}",
        f"precision={args.precision}",
        *args.set,
    ]
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        cfg = compose("train", overrides=overrides)
    torch.set_num_threads(args.threads)
    dist = dist or DistContext()
    torch.manual_seed(cfg.seed + dist.rank)  # as seq2seq-train seeds a rank
    data = prepare_data(cfg.data, barrier=dist.barrier, is_main=dist.is_main)
    return Trainer(
        TrainingParts.of(cfg, torch.device(args.device)),
        Path(args.run_dir),
        data,
        torch.device(args.device),
        dist,
    )


def _recorded(batches: list, used: list[np.ndarray]) -> list:
    used.append(np.concatenate([b.indices for b in batches]))
    return batches


def measure(trainer: Trainer, warmup: int, steps: int) -> dict[str, float]:
    """The device is synchronised before and after the timed updates (they read nothing back between
    them but every log_every updates, as in training). Under torchrun the tokens are every rank's."""
    start_first = time.perf_counter()
    trainer.train_step()
    first_step_done = time.perf_counter()
    for _ in range(warmup - 1):
        trainer.train_step()
        trainer.notice_other_work()
    synchronize(str(trainer.device))
    totals = {"tgt": 0.0, "src": 0.0, "padded_tgt": 0.0, "padded_src": 0.0}
    start = time.perf_counter()
    used: list[np.ndarray] = []  # each update's sentences (1 rank, no accumulation), whatever the epoch
    waited = [0.0]  # seconds the update loop spent getting its batches (on a GPU, from the prefetcher)
    next_update = trainer.stream.next_update

    def timed_next_update(*args: int) -> list:
        asked = time.perf_counter()
        batches = next_update(*args)
        waited[0] += time.perf_counter() - asked
        return _recorded(batches, used)

    trainer.stream.next_update = timed_next_update
    compiled = trainer.update.compiled
    graphs_before = compiled.graphs if compiled is not None else 0
    update_seconds = []  # each update's own wall time: one slow update (a recompile) shows in the max
    for _ in range(steps):
        update_start = time.perf_counter()
        metrics = trainer.train_step()
        trainer.notice_other_work()  # as training does: a job that arrived after the start (--compete)
        update_seconds.append(time.perf_counter() - update_start)
        batch_indices = used[-1]
        src_len, tgt_len = trainer.stream.src_len[batch_indices], trainer.stream.tgt_len[batch_indices]
        totals["tgt"] += metrics["tgt_tokens"]
        totals["src"] += metrics["src_tokens"]
        multiple = trainer.stream.pad_multiple
        totals["padded_tgt"] += len(batch_indices) * padded_width(tgt_len.max() + 1, multiple)
        totals["padded_src"] += len(batch_indices) * padded_width(src_len.max() + 1, multiple)
    synchronize(str(trainer.device))
    seconds = time.perf_counter() - start
    trainer.stream.next_update = next_update
    totals = {side: trainer.dist.sum(count) for side, count in totals.items()}
    return {
        "seconds_per_update": seconds / steps,
        # Without a device sync per update (a GPU's queue runs ahead), so the spread is the host's view
        "update_seconds_min_median_max": [round(float(x), 4) for x in np.percentile(update_seconds, [0, 50, 100])],
        **({"graphs_compiled_while_timed": compiled.graphs - graphs_before} if compiled is not None else {}),
        "batch_wait_seconds_per_update": waited[0] / steps,
        "batch_make_seconds_per_update": batch_make_seconds(trainer, steps),
        "tgt_tokens_per_s": totals["tgt"] / seconds,
        "src_tokens_per_s": totals["src"] / seconds,
        "real_tgt_tokens_per_batch": totals["tgt"] / steps,
        "padded_tgt_tokens_per_batch": totals["padded_tgt"] / steps,
        "real_src_tokens_per_batch": totals["src"] / steps,
        "padded_src_tokens_per_batch": totals["padded_src"] / steps,
        "first_update_s": first_step_done - start_first,
        "_flops": flops_per_update(trainer.model, totals["src"] / steps, totals["tgt"] / steps),
    }


def batch_make_seconds(trainer: Trainer, updates: int) -> float:
    """What making one update's batches costs the host (collating, and on a GPU pinning and starting
    the copies), on this thread: work the prefetcher's thread does beside the update loop, and shares
    the interpreter's lock with it. The stream's position is saved first and restored after, so
    training resumes where it was."""
    stream = getattr(trainer.stream, "stream", trainer.stream)  # under the prefetcher: the stream itself
    ahead = getattr(trainer.stream, "_ahead", None)
    if ahead is not None:
        ahead.result()  # the prefetcher's thread is done with the stream
    state = stream.state_dict()
    start = time.perf_counter()
    for _ in range(updates):
        for batch in stream.next_update(1, 0, trainer.loop.accum_steps):
            batch.to(trainer.device)
    synchronize(str(trainer.device))
    seconds = (time.perf_counter() - start) / updates
    stream.load_state_dict(state)
    return seconds


def counts(trainer: Trainer, updates: int = 3) -> dict[str, float]:
    """What an update asks besides arithmetic (scripts/step_profile.py). Read-backs are counted over
    log_every updates, the span in which training reads the device back once."""
    step = trainer.train_step
    result = {
        **operator_calls_per_update(step, updates),
        **host_reads_per_update(step, trainer.loop.log_every, trainer.device),
    }
    if trainer.device.type == "cuda":
        result.update(gpu_time_per_update(step, max(updates, 5)))
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}


def gpu_code_path_counts(trainer: Trainer, updates: int = 3) -> dict[str, float]:
    """The operator counts of the code a GPU runs, taken on this CPU: torch's dropout (one operator,
    not the CPU's cheaper mask) and the loss in one chunk (as a GPU with memory to spare has it)."""
    with (
        mock.patch.object(dropout, "cheap_mask_applies", lambda _x: False),
        mock.patch.object(loss, "chunk_rows", lambda _vocab, _device: 1 << 30),
    ):
        return {k: round(v, 4) for k, v in operator_calls_per_update(trainer.train_step, updates).items()}


def epoch_batches(trainer: Trainer, multiple: int) -> list[np.ndarray]:
    """The first epoch's batches as training makes them, padded to `multiple`."""
    stream, rng = trainer.stream, np.random.default_rng([trainer.loop.seed, 1])
    return make_batches(stream.src_len, stream.tgt_len, trainer.loop.batch_tokens, rng, multiple)


def epoch_shapes(trainer: Trainer) -> list[dict]:
    """The first epoch's shapes, padded to 1 and to 8."""
    stream = trainer.stream
    return [shapes_per_epoch(stream.src_len, stream.tgt_len, epoch_batches(trainer, m), m) for m in (1, 8)]


def one_run(args: argparse.Namespace, model: str, tokens: int, peaks: tuple[float, float]) -> dict:
    """Timing, counts and shapes of one model at one batch size."""
    on_gpu = torch.device(args.device).type == "cuda"
    if on_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = build_trainer(args, tokens, model)
    result = measure(trainer, args.warmup, args.steps)
    peak, peak_bf16 = peaks
    achieved = result.pop("_flops") / result["seconds_per_update"] / 1e9
    own_peak = peak if trainer.precision == "fp32" else peak_bf16  # fp16 runs at bf16's rate on tensor cores
    counted = counts(trainer)
    if on_gpu:
        counted["gpu_busy_fraction"] = round(
            min(counted["gpu_seconds_per_update"] / result["seconds_per_update"], 1.0), 4
        )
    return {
        "model": model,
        "batch_tokens": tokens,
        "precision": trainer.precision,
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()},
        "model_gflops_per_s": round(achieved, 1),
        "mfu": round(achieved / own_peak, 4),
        **counted,
        "epoch_shapes": epoch_shapes(trainer),
        **({"peak_gpu_memory_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)} if on_gpu else {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1] / "data" / "multi30k"))
    parser.add_argument("--model", default="small")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further training override, e.g. model.d_model=128",
    )
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="auto", help="auto (what seq2seq-train picks here), fp32 or bf16")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument(
        "--counts-only",
        action="store_true",
        help="no timing: per model (--model, or each of --runs), eager's and compile=true's operator calls, "
        "generated kernels and launches per update side by side; counts, so any machine will do",
    )
    parser.add_argument(
        "--graphs-per-epoch",
        action="store_true",
        help="also trace the objective as compile=true does on one batch of each shape of an epoch: graphs, breaks",
    )
    parser.add_argument("--warmup", type=int, default=5, help="updates not timed")
    parser.add_argument("--steps", type=int, default=20, help="updates timed")
    parser.add_argument(
        "--runs",
        default="",
        help="comma-separated model:batch_tokens pairs measured in this one process, e.g. small:8192,base:32768",
    )
    parser.add_argument("--peak-seconds", type=float, default=2.0, help="each matmul ceiling's timing (MFU's scale)")
    parser.add_argument("--report", default="", help="with --runs: also write the report here, after every row")
    parser.add_argument("--scaling", default="", help="comma-separated batch sizes in tokens, e.g. 1024,2048,4096,8192")
    parser.add_argument("--run-dir", default="/tmp/seq2seq-bench-train")
    parser.add_argument("--system-malloc", action="store_true", help="the C library's malloc, not tcmalloc (an A/B)")
    parser.add_argument("--compete", type=int, default=0, help="competing jobs running while the updates are timed")
    parser.add_argument("--compete-threads", type=int, default=2, help="threads of each competing job")
    args = parser.parse_args()
    if args.compile or args.counts_only:
        count_generated_kernels()
    if args.counts_only:
        json.dump(counts_report(args), sys.stdout, indent=2)
        print()
        return
    if args.runs:
        runs_report(args)
        return

    dist = init_distributed(torch.device(args.device))
    if dist.enabled:
        ranks_report(args, dist)
        return
    trainer = build_trainer(args, args.batch_tokens)
    startup = time.perf_counter() - PROCESS_START
    with competing_jobs(args.compete, args.compete_threads) as competition:
        result = measure(trainer, args.warmup, args.steps)
    on_gpu = torch.device(args.device).type == "cuda"
    size = 8192 if on_gpu else 1024  # a GPU is only full with large products
    peak = matmul_peak_gflops(args.peak_seconds, size=size, device=args.device)
    peak_bf16 = matmul_peak_gflops(args.peak_seconds, size=size, dtype=torch.bfloat16, device=args.device)
    report = {
        **run_report(args, trainer, result, peak, processes=1),
        "precision_reason": trainer.precision_choice.reason,
        "startup_to_first_update_s": startup + result["first_update_s"],
        "matmul_peak_bf16_gflops_per_s": round(peak_bf16, 1),
        # fp16 against the bf16 peak: tensor cores run both at one rate (a CPU has no fp16 path here)
        "mfu_vs_own_precision_peak": round(
            report_achieved(result) / (peak if trainer.precision == "fp32" else peak_bf16), 3
        ),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        **({"peak_gpu_memory_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1)} if on_gpu else {}),
        **({"gpu": torch.cuda.get_device_name(args.device)} if on_gpu else {}),
        "device": args.device,
        "competition": competition,
        "thread_waiting": {k: os.environ[k] for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY") if k in os.environ},
        "threads_at_end": torch.get_num_threads(),  # 1 where the job that arrived sent training to one thread
        "machine": machine_info(),
    }
    report.update(counts(trainer))
    if trainer.device.type == "cpu":
        report["gpu_code_path"] = gpu_code_path_counts(trainer)
    report["epoch_shapes"] = epoch_shapes(trainer)
    if args.graphs_per_epoch:
        report["compiled_graphs_per_epoch"] = [
            compiled_graphs_per_epoch(trainer, epoch_batches(trainer, m), m) for m in (1, 8)
        ]
    if args.scaling:
        report["scaling"] = []
        for tokens in (int(t) for t in args.scaling.split(",")):
            scaled = measure(build_trainer(args, tokens), args.warmup, args.steps)
            scaled.pop("_flops")
            report["scaling"].append({"batch_tokens": tokens, **{k: round(v, 4) for k, v in scaled.items()}})
    json.dump(report, sys.stdout, indent=2)
    print()


def report_achieved(result: dict[str, float]) -> float:
    """Model GFLOP/s of a measurement (`measure`)."""
    return result["_flops"] / result["seconds_per_update"] / 1e9


def run_report(args: argparse.Namespace, trainer: Trainer, result: dict, peak: float, processes: int) -> dict:
    """The fields every timed report has: the run, its measurement, and its share of the fp32 GEMM
    rate `peak`."""
    achieved = report_achieved(result)
    return {
        "model": args.model,
        "overrides": args.set,
        "batch_tokens": args.batch_tokens,
        "threads": args.threads,
        "processes": processes,
        "compile": args.compile,
        "precision": trainer.precision,
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        **{k: round(v, 4) if isinstance(v, float) else v for k, v in result.items() if k != "_flops"},
        "model_gflops_per_s": round(achieved, 1),
        "matmul_peak_gflops_per_s": round(peak, 1),
        "mfu_vs_fp32_peak": round(achieved / peak, 3),
    }


def ranks_report(args: argparse.Namespace, dist: DistContext) -> None:
    """Under torchrun: every rank trains its share of each update; rank 0 prints tokens/s over all of
    them, against the GEMM rate of all ranks measured at once (each with its threads), and each rank's
    peak RSS. The counts and shapes of one process are left to a run without torchrun."""
    try:
        trainer = build_trainer(args, args.batch_tokens, dist=dist)
        summed = gradient_sum_seconds(trainer)
        result = measure(trainer, args.warmup, args.steps)
        dist.barrier()  # every rank's GEMMs at once: the rate at which the ranks share the machine
        peak = dist.sum(matmul_peak_gflops(args.peak_seconds, device=args.device))
        rss = dist.gather(round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
        waits = dist.gather(rank_waits(trainer, summed, args.steps)) if summed else []  # eager: DDP's own
        if dist.is_main:
            report = {
                **run_report(args, trainer, result, peak, processes=dist.world_size),
                "batch_tokens_per_update": args.batch_tokens * dist.world_size,
                "peak_rss_mb_by_rank": rss,
                "peak_rss_mb": max(rss),
                **({"gradient_sum_ms_per_update_by_rank": waits} if waits else {}),
                "device": args.device,
                "machine": machine_info(),
            }
            json.dump(report, sys.stdout, indent=2)
            print()
    finally:
        cleanup_distributed()


def gradient_sum_seconds(trainer: Trainer) -> list[float]:
    """Each compiled update's gradient all-reduce, timed on this rank (the list fills as it trains).
    The all-reduce returns once every rank has joined it, so its time is the collective's own plus
    this rank's wait for the slowest: the cost of ranks out of step. DistributedDataParallel's eager
    all-reduces overlap the backward inside its hooks and are not timed here."""
    seconds: list[float] = []
    dist, sum_in_place = trainer.dist, trainer.dist.sum_in_place

    def timed(tensor: torch.Tensor) -> None:
        start = time.perf_counter()
        sum_in_place(tensor)
        seconds.append(time.perf_counter() - start)

    dist.sum_in_place = timed  # on this instance only, which the compiled update holds
    return seconds


def rank_waits(trainer: Trainer, summed: list[float], updates: int, calls: int = 10) -> dict[str, float]:
    """This rank's gradient all-reduces over the last `updates` (the timed ones) of `summed`, in ms an
    update, against the collective's own time: the same buffers summed `calls` times, every rank lined
    up by a barrier first (the median). The difference is the time this rank waited for the others."""
    copies = [gradient.clone() for gradient in trainer.update.parameters.gradients()]  # the run's left as they are
    timed = summed[-updates * len(copies) :]
    own = []
    for _ in range(calls):
        trainer.dist.barrier()
        start = time.perf_counter()
        for copy in copies:
            torch.distributed.all_reduce(copy)
        own.append(time.perf_counter() - start)
    mean, alone = sum(timed) / updates * 1e3, float(np.median(own)) * 1e3
    return {"mean": round(mean, 1), "collective": round(alone, 1), "waiting": round(mean - alone, 1)}


def counts_report(args: argparse.Namespace) -> dict:
    """--counts-only: what an update launches, eager and compiled, per model (seq2seq/train/
    compiled_update.py compiles the whole update); the compiled count is a floor for a GPU's kernel
    count of the same graph (scripts/count_gpu_kernels.py counts the Triton code). Compiling takes minutes on a CPU (its seconds are in the report, not a measurement
    of anything but this machine's load)."""
    runs = [item.split(":") for item in args.runs.split(",")] if args.runs else [(args.model, args.batch_tokens)]
    rows = []
    for model, tokens in runs:
        row: dict = {"model": model, "batch_tokens": int(tokens)}
        for compiled in (False, True):
            args.compile = compiled
            trainer = build_trainer(args, int(tokens), model)
            for _ in range(args.warmup):
                trainer.train_step()
            compiler = trainer.update.compiled
            graphs = compiler.graphs if compiler else 0
            counted = {k: round(v, 2) for k, v in operator_calls_per_update(trainer.train_step, 3).items()}
            counted["peak_allocated_mb"] = round(
                peak_allocated_per_update(trainer.train_step, 3)["peak_allocated_mb"], 1
            )
            if compiler is not None:
                counted["graphs"] = compiler.graphs
                counted["graphs_compiled_while_counting"] = compiler.graphs - graphs
                counted["compile_seconds"] = round(compiler.compile_seconds, 1)
                counted["generated_kernels_by_name"] = generated_kernel_names(trainer.train_step)
            row["precision"] = trainer.precision
            row["compiled" if compiled else "eager"] = counted
        eager_calls, launches = row["eager"]["operator_calls_per_update"], row["compiled"].get("launches_per_update")
        if launches is not None:
            row["compiled_launches_over_eager_operator_calls"] = round(launches / eager_calls, 4)
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return {
        "counts_only": True,
        "threads": args.threads,
        "overrides": args.set,
        "warmup_updates": args.warmup,
        "runs": rows,
        "device": args.device,
        "machine": machine_info(),
    }


def runs_report(args: argparse.Namespace) -> None:
    """--runs: several models and batch sizes in one process (one start-up, one peak measurement)."""
    size = 8192 if torch.device(args.device).type == "cuda" else 1024
    peaks = (
        matmul_peak_gflops(args.peak_seconds, size=size, device=args.device),
        matmul_peak_gflops(args.peak_seconds, size=size, dtype=torch.bfloat16, device=args.device),
    )
    rows = []
    for item in args.runs.split(","):
        model, tokens = item.split(":")
        try:
            rows.append(one_run(args, model, int(tokens), peaks))
        except Exception as err:  # one failing size (out of memory) must not lose the others' rows
            traceback.print_exc()  # to stderr: the JSON row keeps only the message
            rows.append({"model": model, "batch_tokens": int(tokens), "error": f"{type(err).__name__}: {err}"[:500]})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        if args.report:  # after every row: a process stopped by a time limit keeps the rows it finished
            write_report(Path(args.report), runs_summary(args, peaks, rows))
    json.dump(runs_summary(args, peaks, rows), sys.stdout, indent=2)
    print()


def write_report(path: Path, report: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)


def runs_summary(args: argparse.Namespace, peaks: tuple[float, float], rows: list[dict]) -> dict:
    return {
        "precision_asked": args.precision,
        "compile": args.compile,
        "overrides": args.set,
        "matmul_peak_gflops_per_s": round(peaks[0], 1),
        "matmul_peak_bf16_gflops_per_s": round(peaks[1], 1),
        "runs": rows,
        **({"gpu": torch.cuda.get_device_name(args.device)} if torch.device(args.device).type == "cuda" else {}),
        "device": args.device,
        "machine": machine_info(),
    }


if __name__ == "__main__":
    main()
