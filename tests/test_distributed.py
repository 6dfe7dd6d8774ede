"""DistributedDataParallel on CPU (gloo, 2 processes): the same update as one process, and a real
`torchrun ... seq2seq-train` run that agrees on one run directory."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from contextlib import nullcontext
from datetime import timedelta
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import compose_config
from numerics import assert_close, reordered_sum_tolerance
from omegaconf import DictConfig
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from seq2seq.data.batching import collate
from seq2seq.data.pipeline import prepare_data
from seq2seq.train.distributed import DistContext, cleanup_distributed, init_distributed
from seq2seq.train.parts import TrainingParts
from seq2seq.train.trainer import Trainer

OVERRIDES = [
    "data.task_train_size=64",
    "data.task_valid_size=8",
    "model.dropout=0.0",  # no randomness: the runs must agree to float tolerance
    "precision=fp32",  # the runs must agree to float tolerance: auto takes bf16 where the CPU has it
    "batch_tokens=512",
    "threads=1",
    "attention_images=false",
]
HALF_A, HALF_B = np.arange(0, 12), np.arange(12, 24)


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket is held until all are bound, so none is given twice."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def updates(
    rank: int,
    world_size: int,
    port: int,
    plans: list[list[list[np.ndarray]]],
    cache: str,
    outs: list[str],
    compiled: bool = False,
) -> None:
    """For each plan, runs one optimiser update on this rank with the micro-batches `plan[rank]` and
    saves the parameters (rank 0) with how many gradient all-reduces DDP made. The plans share one
    process group: a spawn costs seconds. `compiled`: compile=true's update, traced by TorchDynamo and
    run as traced (the "eager" backend: Inductor's kernels would take minutes to build)."""
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world_size)}
    )
    os.environ["SEQ2SEQ_CACHE"] = cache
    torch.set_num_threads(1)
    dist = init_distributed(torch.device("cpu"))
    try:
        tracing = mock.patch("torch.compile", partial(torch.compile, backend="eager")) if compiled else nullcontext()
        with tracing:
            for plan, out in zip(plans, outs, strict=True):
                one_update(plan[rank], out, dist, compiled)
        # Both ranks leave the group together: rank 1 tearing gloo down while rank 0 was still saving
        # aborted rank 1 once in CI ("terminate called without an active exception").
        dist.barrier()
    finally:
        cleanup_distributed()


def one_update(micro_batches: list[np.ndarray], out: str, dist: DistContext, compiled: bool = False) -> None:
    overrides = [*OVERRIDES, f"accum_steps={len(micro_batches)}", f"compile={str(compiled).lower()}"]
    cfg = compose_config("train", overrides)
    data = prepare_data(cfg.data, barrier=dist.barrier, is_main=dist.is_main)
    # The same initial weights on every rank; compiled, rank 1 draws others, which rank 0's replace.
    torch.manual_seed(dist.rank if compiled else 0)
    trainer = Trainer(TrainingParts.of(cfg, torch.device("cpu")), Path(out).parent, data, torch.device("cpu"), dist)
    allreduces = []
    if compiled:
        assert trainer.update.compiled is not None
    elif dist.enabled:

        def counting_hook(state, bucket):  # DDP checks annotations at run time; string ones fail
            allreduces.append(bucket.index())
            return allreduce_hook(state, bucket)

        trainer.update.training_objective.register_comm_hook(None, counting_hook)
    batches = [collate(data.train, indices, cfg.model.max_positions) for indices in micro_batches]
    trainer.stream.next_update = lambda *_args: batches
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    grads = (record_compiled_gradients if compiled else record_gradients_at_the_update)(trainer)
    assert trainer.train_step() is not None
    (update,) = trainer.check_updates()  # every rank: the read-back sums over ranks
    if dist.is_main:
        params, tokens = trainer.model.state_dict(), update.src_tokens + update.tgt_tokens
        torch.save(
            {"params": params, "before": before, "grads": grads, "tokens": tokens, "allreduces": len(allreduces)},
            out,
        )


def record_gradients_at_the_update(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The gradients (all-reduced, clipped) the optimiser is given, filled in when it steps."""
    grads: dict[str, torch.Tensor] = {}
    step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        grads.update({name: p.grad.detach().clone() for name, p in trainer.model.named_parameters()})
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    return grads


def record_compiled_gradients(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The gradients (all-reduced, not yet clipped) the compiled step is given under torchrun."""
    grads: dict[str, torch.Tensor] = {}
    compiled = trainer.update.compiled
    step = compiled._step

    def recording_step(*args):
        grads.update({name: p.grad.detach().clone() for name, p in trainer.model.named_parameters()})
        return step(*args)

    compiled._step = recording_step
    return grads


def in_this_process(plans: dict[str, list[list[np.ndarray]]], tmp_path: Path) -> dict[str, dict]:
    """Each named plan's update in this process, without a process group (the two ranks': two_ranks)."""
    outs = [str(tmp_path / f"{name}.pt") for name in plans]
    with mock.patch.dict(os.environ):  # the rank's variables and cache stay out of later tests
        updates(0, 1, 0, list(plans.values()), str(tmp_path / "cache"), outs)
    return {name: torch.load(out, weights_only=True) for name, out in zip(plans, outs, strict=True)}


@pytest.fixture(autouse=True)
def _single_process_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)


def gradient_tolerance(grad: torch.Tensor, tokens: int, model: DictConfig) -> float:
    """How far one element of a gradient may move when its sums are taken in another order: each is a
    sum over the update's tokens (split between ranks and added by the all-reduce, or taken in one
    GEMM), at the end of a backward chain through every layer's dot products of up to ffn_dim terms."""
    terms = tokens + (model.encoder_layers + model.decoder_layers) * model.ffn_dim
    return reordered_sum_tolerance(terms, float(grad.abs().max()))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Everything that needs two spawned ranks, in one spawn (a spawn starts two interpreters that import
    torch: seconds): two updates, each rank with one micro-batch and each with two; then a training whose
    rank 1 hangs (hung_rank_one_run)."""
    root = tmp_path_factory.mktemp("ddp")
    plans = {"one": [[HALF_A], [HALF_B]], "two": [[HALF_A[:6], HALF_A[6:]], [HALF_B[:6], HALF_B[6:]]]}
    outs = [str(root / f"{name}.pt") for name in plans]
    hung = SimpleNamespace(run=root / "hung" / "run", cache=root / "hung" / "cache", errors=root / "hung" / "rank0.txt")
    update_port, hung_port = free_ports(2)
    updates_args = (2, update_port, list(plans.values()), str(root / "cache"), outs)
    hung_args = (hung_port, str(hung.run), str(hung.cache), str(hung.errors))
    mp.spawn(updates_then_a_hung_rank, args=(updates_args, hung_args), nprocs=2, join=True)
    done = {name: torch.load(out, weights_only=True) for name, out in zip(plans, outs, strict=True)}
    return SimpleNamespace(updates=done, hung=hung)


def updates_then_a_hung_rank(rank: int, updates_args: tuple, hung_args: tuple) -> None:
    updates(rank, *updates_args)  # leaves its process group
    hung_rank_one_run(rank, *hung_args)  # joins a new one


@pytest.fixture(scope="module")
def ddp(two_ranks: SimpleNamespace) -> dict[str, dict]:
    return two_ranks.updates


def test_two_ranks_equal_one_rank_with_the_same_tokens(tmp_path: Path, ddp: dict[str, dict]) -> None:
    """The all-reduced gradient of two ranks is the gradient of one process over both halves, and the
    gradient accumulated over two micro-batches, up to the order of the sums. Gradients, not updated
    weights, are compared: Adam's first step is lr * g / (|g| + eps), which turns a rounding-level
    difference in a near-zero gradient into a weight difference of up to 2 * lr."""
    both = np.concatenate([HALF_A, HALF_B])
    one = in_this_process({"big": [[both]], "accum": [[HALF_A, HALF_B]]}, tmp_path)
    single_big_batch, accumulated, two_ranks = one["big"], one["accum"], ddp["one"]
    tokens = two_ranks["tokens"]
    assert tokens == single_big_batch["tokens"] == accumulated["tokens"]
    model = compose_config("train", OVERRIDES).model  # composed once: a composition takes a quarter second
    for name, grad in two_ranks["grads"].items():
        atol = gradient_tolerance(grad, tokens, model)
        assert_close(grad, single_big_batch["grads"][name], f"{name} (DDP vs one batch)", atol=atol)
        assert_close(grad, accumulated["grads"][name], f"{name} (DDP vs accumulation)", atol=atol)
    moved = [not torch.equal(two_ranks["params"][name], before) for name, before in two_ranks["before"].items()]
    assert all(moved), "the update was not applied to every parameter"


def test_compiled_update_under_torchrun_is_the_update_of_one_process(tmp_path: Path) -> None:
    """compile=true under torchrun: each rank's compiled backward, the flat gradient all-reduced, then
    the compiled step. Its gradients are those of one eager process over both halves (up to the order
    of the sums), from rank 0's weights though rank 1 drew others, and the step moved every weight."""
    both = np.concatenate([HALF_A, HALF_B])
    (one,) = in_this_process({"big": [[both]]}, tmp_path).values()  # seed 0: rank 0's weights
    out = str(tmp_path / "ranks.pt")
    updates_args = (2, free_port(), [[[HALF_A], [HALF_B]]], str(tmp_path / "cache"), [out], True)
    mp.spawn(updates, args=updates_args, nprocs=2, join=True)
    ranks = torch.load(out, weights_only=True)
    assert ranks["tokens"] == one["tokens"]
    cfg = compose_config("train", OVERRIDES)
    # Recorded before the step's clipping, the eager ones after it: clipped here as torch clips them.
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in ranks["grads"].values()]))
    clipped = min(1.0, cfg.optim.clip_norm / (float(norm) + 1e-6))
    for name, grad in ranks["grads"].items():
        atol = gradient_tolerance(grad, ranks["tokens"], cfg.model)
        assert_close(grad * clipped, one["grads"][name], f"{name} (compiled DDP vs one batch)", atol=atol)
    assert all(not torch.equal(ranks["params"][name], before) for name, before in ranks["before"].items())


def test_accumulation_under_ddp_all_reduces_only_on_the_update(ddp: dict[str, dict]) -> None:
    assert ddp["one"]["allreduces"] > 0
    assert ddp["two"]["allreduces"] == ddp["one"]["allreduces"]  # no_sync on the first micro-batch


def test_torchrun_trains_validates_and_checkpoints_once(tmp_path: Path) -> None:
    """Two CPU processes under torchrun: one run directory (rank 0's), one set of checkpoints and
    one validation per validation step in the log."""
    env = {**os.environ, "SEQ2SEQ_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    command = [
        str(Path(sys.executable).parent / "torchrun"),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "seq2seq.cli.train",
        *OVERRIDES,
        "max_steps=4",
        "valid_every=2",
        "save_every=2",
        "progress=false",
        "hydra.run.dir=" + str(tmp_path / "outputs" / "${now:%H-%M-%S-%f}"),  # each rank's clock differs
    ]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [p for p in (tmp_path / "outputs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs  # the other rank's directory was given up
    checkpoints = {p.name for p in (runs[0] / "checkpoints").glob("*.pt")}
    assert checkpoints >= {"last.pt", "best.pt", "step_2.pt", "step_4.pt"}
    log = (runs[0] / "train.log").read_text()
    assert log.count("validation at update 2:") == 1 and log.count("validation at update 4:") == 1
    assert "x 2 ranks per update" in log
    # Each rank's own random state (seeded seed+rank), so a resumed rank 1 does not take rank 0's.
    states = torch.load(runs[0] / "checkpoints" / "last.pt", weights_only=True)["rng"]
    assert len(states) == 2 and not torch.equal(states[0]["torch"], states[1]["torch"])


def test_each_rank_takes_its_gpu_before_joining_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the process group (and the run-directory broadcast) came before set_device, so NCCL
    used GPU 0 on every rank, and device=cuda:0 kept every rank's collectives on GPU 0. Recorded
    without a GPU: the calls torch.cuda and torch.distributed receive, in order."""
    import torch.distributed as torch_dist

    calls: list[tuple] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(torch_dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch_dist, "init_process_group", lambda **kwargs: calls.append(("init", kwargs)))
    monkeypatch.setattr(torch_dist, "get_rank", lambda: 1)
    monkeypatch.setattr(torch_dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch_dist, "new_group", lambda **kwargs: calls.append(("new_group", kwargs)))
    context = init_distributed(torch.device("cuda", 0))
    gpu1 = torch.device("cuda", 1)
    assert calls[0] == ("set_device", gpu1)
    assert calls[1][0] == "init" and calls[1][1]["backend"] == "nccl" and calls[1][1]["device_id"] == gpu1
    assert (context.rank, context.local_rank, context.device) == (1, 1, gpu1)
    # The configurable timeouts (defaults 10 and 360 minutes): ordinary collectives, and waiting on rank 0.
    assert calls[1][1]["timeout"] == timedelta(minutes=10)
    assert calls[2] == ("new_group", {"backend": "gloo", "timeout": timedelta(minutes=360)})
    calls.clear()
    init_distributed(torch.device("cpu"), timeout_minutes=0.5, wait_minutes=45)
    assert calls[0][1]["backend"] == "gloo" and calls[0][1]["timeout"] == timedelta(seconds=30)
    assert calls[1] == ("new_group", {"backend": "gloo", "timeout": timedelta(minutes=45)})


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_torchrun_on_two_gpus_with_device_cuda_0(tmp_path: Path) -> None:
    """Each rank on its own GPU even when the config names one (NCCL fails on a shared GPU)."""
    env = {**os.environ, "SEQ2SEQ_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    command = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2"]
    command += ["-m", "seq2seq.cli.train", *OVERRIDES, "max_steps=2", "valid_every=2", "progress=false"]
    command += ["device=cuda:0", f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def slow_rank_zero_run(rank: int, world_size: int, port: int, run_dir: str, cache: str, seconds: float) -> None:
    """train() on this rank; rank 0 takes `seconds` longer than the collective timeout (3 s) both to
    prepare the data and for every validation, as tokenizing a large corpus or a long BLEU pass would."""
    import time

    import seq2seq.train.command as run
    from seq2seq.cli.train import train
    from seq2seq.train.trainer import Trainer as LoopTrainer

    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world_size)}
    )
    os.environ["SEQ2SEQ_CACHE"] = cache
    torch.set_num_threads(1)
    if rank == 0:
        prepare, validate = run.prepare_corpus, LoopTrainer.validate

        def slow_prepare(*args, **kwargs):
            time.sleep(seconds)
            return prepare(*args, **kwargs)

        def slow_validate(self):
            time.sleep(seconds)
            return validate(self)

        run.prepare_corpus = slow_prepare
        LoopTrainer.validate = slow_validate
    overrides = [*OVERRIDES, "max_steps=4", "valid_every=2", "progress=false", "dist_timeout_minutes=0.05"]
    summary = train(compose_config("train", overrides), Path(run_dir))
    assert summary["step"] == 4


@pytest.mark.slow
def test_a_slow_rank_zero_does_not_time_the_others_out(tmp_path: Path) -> None:
    """Regression: the other ranks waited for rank 0's data preparation and validation inside ordinary
    collectives, under the 10-minute default (NCCL's watchdog then kills them); here with a 3-second
    dist_timeout_minutes and rank 0 taking 6 s each time, on gloo."""
    args = (2, free_port(), str(tmp_path / "run"), str(tmp_path / "cache"), 6.0)
    mp.spawn(slow_rank_zero_run, args=args, nprocs=2, join=True)
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()


def hung_rank_one_run(rank: int, port: int, run_dir: str, cache: str, errors: str) -> None:
    """train() on two ranks; rank 1 stops answering at update 2 (past the 3-second
    dist_timeout_minutes, until rank 0 has written what it raised to `errors`), then leaves."""
    import time

    from seq2seq.cli.train import train
    from seq2seq.train.trainer import Trainer as LoopTrainer

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": "2"})
    os.environ["SEQ2SEQ_CACHE"] = cache
    torch.set_num_threads(1)
    if rank == 1:
        train_step = LoopTrainer.train_step

        def hang_at_update_two(self):
            if self.step == 2:  # silent until rank 0 has given up on it (30 s at most), then gone
                deadline = time.monotonic() + 30
                while not Path(errors).exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
                os._exit(0)
            return train_step(self)

        LoopTrainer.train_step = hang_at_update_two
    overrides = [*OVERRIDES, "max_steps=6", "valid_every=100", "save_every=1", "progress=false"]
    try:
        train(compose_config("train", [*overrides, "dist_timeout_minutes=0.05"]), Path(run_dir))
    except Exception as error:
        Path(errors).write_text(f"{type(error).__name__}: {error}")


def test_the_rank_left_waiting_for_a_hung_one_says_so_in_one_line(two_ranks: SimpleNamespace) -> None:
    """Regression (#30): the survivor stopped after dist_timeout_minutes as promised, but with gloo's
    raw RuntimeError ("Timed out waiting 3000ms for recv operation to complete")."""
    hung = two_ranks.hung
    message = hung.errors.read_text()
    assert message.startswith("UserError: rank 0: rank 1 stopped answering"), message
    assert "dist_timeout_minutes=0.05" in message and f"resume={hung.run}" in message
    assert "\n" not in message
    assert (hung.run / "checkpoints" / "last.pt").is_file()  # what the resume continues from


def test_one_rank_under_torchrun_joins_a_group_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `torchrun --nproc_per_node=1` sets in the environment makes init_distributed join a real
    gloo group of one (the multi-GPU path, DDP included); the same environment without torchrun's run id
    joins none. The whole way through torchrun: the slow test below and test_torchrun_trains_validates_and_checkpoints_once."""
    port = free_port()
    for key, value in {"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert not init_distributed(torch.device("cpu")).enabled  # a plain process: no group
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    try:
        context = init_distributed(torch.device("cpu"))
        assert context.enabled and (context.rank, context.world_size) == (0, 1)
        assert torch.distributed.get_backend() == "gloo"
    finally:
        cleanup_distributed()


@pytest.mark.slow  # torchrun and a training start in subprocesses; test_one_rank_under_torchrun_joins_a_group_of_one
def test_torchrun_with_one_rank_trains_in_a_process_group(tmp_path: Path) -> None:
    """`torchrun --nproc_per_node=1` runs the multi-GPU code path (a process group of one, DDP), so one
    GPU checks NCCL; a plain process (no torchrun) joins none. On the CPU the group is gloo's."""
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=1"]
    overrides = [*OVERRIDES, "max_steps=4", "valid_every=4", "save_every=4", "progress=false", "device=cpu"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SEQ2SEQ_CACHE": str(tmp_path / "cache")}
    command = [*torchrun, "-m", "seq2seq.cli.train", *overrides, f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "distributed: rank 0 of 1, gloo backend" in log, log[-2000:]
    assert "reached max_steps=4" in log
    assert not init_distributed(torch.device("cpu")).enabled  # this test process: no torchrun, no group
