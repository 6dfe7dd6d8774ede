"""Faults during training (`seq2seq.train.trainer.Trainer`): a NaN/inf loss or gradient skips the update
and, repeated, stops the run with the last good checkpoint intact; running out of memory on a batch
retries the update with the batch split in two, or skips it. Out of memory is simulated on the CPU
by raising torch.OutOfMemoryError (what CUDA raises) from the training objective."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, compose_config
from numerics import assert_equal

from seq2seq.artifacts.checkpoint import load_checkpoint, model_from_checkpoint
from seq2seq.cli.train import train
from seq2seq.config import UserError
from seq2seq.data.batching import Batch, collate, split_batch
from seq2seq.data.pipeline import PreparedData, prepare_data
from seq2seq.precision import PrecisionChoice
from seq2seq.train.distributed import DistContext
from seq2seq.train.loss import TeacherForcedLoss
from seq2seq.train.parts import TrainingParts
from seq2seq.train.reporting import Report
from seq2seq.train.trainer import NonFiniteLoss, RepeatedOutOfMemory, Trainer

LOOP_LOGGER = "seq2seq.train"  # the loop (trainer.py) and its update (update.py)
FAULT_TRAIN = [
    *TINY_TRAIN,
    "data.task_train_size=200",
    "model.dropout=0.0",  # no randomness: two trainers given the same batches make the same update
    "max_skipped_updates=3",
    "log_every=100",  # read back when a test says (check_updates), or at validations and saves
]
SIMULATED_OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (simulated)"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    cache = tmp_path_factory.mktemp("faults-cache")
    cfg = compose_config("train", [*FAULT_TRAIN, f"data.cache_dir={cache}"])
    return cfg, prepare_data(cfg.data)


def make_trainer(setup: tuple, tmp_path: Path, batches: list[Batch]) -> Trainer:
    """A trainer whose every update is made from `batches` (its micro-batches), from seed-0 weights."""
    cfg, data = setup
    torch.manual_seed(0)
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path / "run", data, torch.device("cpu"), DistContext()
    )
    trainer.stream.next_update = lambda *_args: list(batches)
    return trainer


def batch_of(data: PreparedData, indices: np.ndarray) -> Batch:
    return collate(data.train, indices, 256)


def parameters(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in trainer.model.named_parameters()}


def assert_same_parameters(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert_equal(a[name], b[name], name)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(LOOP_LOGGER) and r.levelno == logging.WARNING]


# --- non-finite loss or gradient -----------------------------------------------------------------


class InfiniteGradient(torch.autograd.Function):
    """Identity forward (the loss stays finite), infinite gradient backward."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")


def poison(trainer: Trainer, bad_calls: set[int], how: str) -> None:
    """The objective's n-th call (1-based) for n in `bad_calls` gives a NaN/inf loss or an inf gradient."""
    real = trainer.objective.forward
    calls = []

    def forward(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, *positions: torch.Tensor) -> tuple:
        loss, nll = real(src, tgt_in, tgt_out, *positions)
        calls.append(1)
        if len(calls) in bad_calls:
            if how == "nan_loss":
                loss = loss * float("nan")
            elif how == "inf_loss":
                loss = loss * float("inf")
            else:
                loss = InfiniteGradient.apply(loss)
        return loss, nll

    trainer.objective.forward = forward


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("nan_loss", r"loss=nan grad_norm=nan"),
        ("inf_loss", r"loss=inf grad_norm=(inf|nan)"),
        ("inf_grad", r"loss=\d+\.\d+ grad_norm=(inf|nan)"),
    ],
)
def test_a_non_finite_update_is_skipped_without_a_trace(setup, tmp_path, caplog, how, message):
    """The device skips the update (no read-back decides it): weights and Adam's moments stay, the
    update's number is used, as the schedule's is under torch's GradScaler. check_updates tells."""
    _, data = setup
    batches = [batch_of(data, np.arange(0, 8))]
    trainer = make_trainer(setup, tmp_path, batches)
    poison(trainer, {1}, how)
    before, updates = parameters(trainer), trainer.optimizer.updates
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        assert trainer.train_step() is not None
        assert warnings_of(caplog) == []  # nothing is known on the host until the read-back
        results = trainer.check_updates()
    assert [(r.step, r.skipped) for r in results] == [(1, True)]
    assert re.fullmatch(rf"update 1 skipped: {message} \(not finite\)", warnings_of(caplog)[0])
    assert len(warnings_of(caplog)) == 1
    assert_same_parameters(parameters(trainer), before)
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_skips) == (1, 1, 1)
    assert not any(p.grad.any() for p in trainer.model.parameters())  # cleared
    for state in trainer.optimizer.state.values():  # Adam's moments and step counts were never moved
        assert int(state["step"]) == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    assert trainer.optimizer.updates == updates + 1

    # Training goes on, and the next update is exactly the one a trainer without the fault makes as
    # its second (the learning rate of update 2, Adam's first step).
    trainer.train_step()
    (result,) = trainer.check_updates()
    assert not result.skipped and np.isfinite(result.loss)
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_skips) == (2, 1, 0)
    clean = make_trainer(setup, tmp_path, batches)
    clean.optimizer.updates = 1
    clean.train_step()
    assert_same_parameters(parameters(trainer), parameters(clean))
    assert not torch.equal(parameters(trainer)["src_embed.weight"], before["src_embed.weight"])


def test_only_consecutive_skips_count_toward_the_limit(setup, tmp_path, caplog):
    _, data = setup
    trainer = make_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 8))])
    poison(trainer, {1, 2, 4, 5}, "nan_loss")  # limit 3: two bad, one good, two bad, one good
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        for _ in range(6):
            trainer.train_step()
        outcomes = [not r.skipped for r in trainer.check_updates()]
    assert outcomes == [False, False, True, False, False, True]
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_skips) == (6, 4, 0)
    assert warnings_of(caplog) == [f"update {n} skipped: loss=nan grad_norm=nan (not finite)" for n in (1, 2, 4, 5)]


def test_updates_are_read_back_every_log_every_updates(setup, tmp_path):
    """train_step reads the device back once per log_every updates: the updates in between wait on the
    device, and a run of non-finite ones is found at the next read-back."""
    cfg, data = setup
    cfg = cfg.copy()
    cfg.log_every = 5
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path / "run", data, torch.device("cpu"), DistContext()
    )
    trainer.stream.next_update = lambda *_args: [batch_of(data, np.arange(0, 8))]
    poison(trainer, set(range(3, 100)), "nan_loss")
    for _ in range(4):
        trainer.train_step()
    assert [p.step for p in trainer.pending] == [1, 2, 3, 4] and trainer.skipped_updates == 0
    with pytest.raises(NonFiniteLoss, match="3 updates in a row"):
        trainer.train_step()  # update 5 reads all five back
    assert trainer.pending == [] and trainer.skipped_updates == 3


def test_the_loop_hands_the_heap_back_every_so_many_updates(setup, tmp_path):
    """fit calls the allocator's release once an update (allocator.FreeMemoryRelease, whose effect on
    the heap tests/test_allocator.py reads from /proc), so that it runs every `every` updates."""
    cfg, data = setup
    cfg = cfg.copy()
    cfg.max_steps, cfg.valid_every, cfg.save_every = 5, 1000, 1000
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path / "run", data, torch.device("cpu"), DistContext()
    )
    trainer.stream.next_update = lambda *_args: [batch_of(data, np.arange(0, 8))]
    trims: list[int] = []
    trainer.free_memory.every, trainer.free_memory.trim = 2, trims.append
    assert trainer.fit(Report()) == "reached max_steps=5"
    assert trainer.step == 5 and trainer.free_memory.calls == 5 and trims == [0, 0]


def test_a_run_that_keeps_getting_nan_stops_with_its_last_good_checkpoint(tmp_path, monkeypatch, caplog):
    """Through train(): four good updates (checkpoint at 4), then NaN for ever -> NonFiniteLoss after
    max_skipped_updates=3 skips, and checkpoints/last.pt is the one from update 4."""
    real = TeacherForcedLoss.forward
    training_calls = []

    def nan_after_four_updates(self: TeacherForcedLoss, src, tgt_in, tgt_out, *positions):
        loss, nll = real(self, src, tgt_in, tgt_out, *positions)
        if torch.is_grad_enabled() and self.training:  # validation (inference mode) stays clean
            training_calls.append(1)
            if len(training_calls) > 4:
                loss = loss * float("nan")
        return loss, nll

    monkeypatch.setattr(TeacherForcedLoss, "forward", nan_after_four_updates)
    run_dir = tmp_path / "run"
    cfg = compose_config("train", [*FAULT_TRAIN, "max_steps=20", "valid_every=4", "save_every=4"])
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER), pytest.raises(NonFiniteLoss) as info:
        train(cfg, run_dir)
    assert isinstance(info.value, UserError)  # the CLI prints it as one line, exit status 2
    assert str(info.value) == (
        "3 updates in a row had a non-finite loss or gradient (max_skipped_updates=3); "
        f"the last good checkpoint is in {run_dir / 'checkpoints'}"
    )
    # Read back at update 8, before its validation: the third non-finite update in a row stops the run.
    assert warnings_of(caplog) == [f"update {n} skipped: loss=nan grad_norm=nan (not finite)" for n in (5, 6, 7)]
    assert len(training_calls) == 8
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt", "step_4.pt"]
    last = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    assert last["step"] == 4 and last["skipped_updates"] == 0
    assert all(torch.isfinite(t).all() for t in last["model"].values())
    model_from_checkpoint(last)  # loads into a model of the saved config


def test_a_run_that_gets_nan_before_its_first_save_names_no_checkpoint(setup, tmp_path):
    # It said "the last good checkpoint is in <run>/checkpoints", a directory that did not exist.
    _, data = setup
    trainer = make_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 4))])
    poison(trainer, set(range(1, 10)), "nan_loss")
    for _ in range(3):
        trainer.train_step()
    with pytest.raises(NonFiniteLoss) as info:
        trainer.check_updates()
    assert str(info.value) == (
        "3 updates in a row had a non-finite loss or gradient (max_skipped_updates=3); "
        "no checkpoint was saved yet (the first save is at update 4)"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_validation_whose_loss_is_nan_is_never_the_best(setup, tmp_path, caplog):
    # optim.eps=0 trained NaN weights, and their first validation was "(new best)" and wrote best.pt
    # (NaN compares false with everything, so `best is None` decided alone).
    _, data = setup
    trainer = make_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 4))])
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.fill_(float("nan"))
    trainer.step = 4
    with caplog.at_level(logging.INFO, logger=LOOP_LOGGER):
        trainer.validate_and_save(Report())
    assert np.isnan(trainer.last_metrics["loss"])
    assert trainer.best is None and trainer.validations_since_best == 1
    assert (tmp_path / "run" / "checkpoints" / "last.pt").is_file()
    assert not (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    assert "(new best)" not in caplog.text
    # Nor after a finite best, whatever the diverged weights' other metrics say.
    trainer.best = {"value": -1.0, "step": 2}
    assert not trainer.improved({**trainer.last_metrics, trainer.loop.best_metric: 100.0})


# --- out of memory --------------------------------------------------------------------------------


class OutOfMemoryInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError(SIMULATED_OOM)


def run_out_of_memory(trainer: Trainer, fails: Callable[[torch.Tensor], bool], where: str = "forward") -> list[int]:
    """The objective runs out of memory on batches for which `fails(src)` holds, in its forward or in
    the backward. Returns the number of sentences of every batch it was called with."""
    real = trainer.objective.forward
    seen = []

    def forward(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, *positions: torch.Tensor) -> tuple:
        seen.append(src.size(0))
        if fails(src) and where == "forward":
            raise torch.OutOfMemoryError(SIMULATED_OOM)
        loss, nll = real(src, tgt_in, tgt_out, *positions)
        return (OutOfMemoryInBackward.apply(loss) if fails(src) else loss), nll

    trainer.objective.forward = forward
    return seen


def test_split_batch_halves_are_what_collate_makes(setup):
    _, data = setup
    lengths = data.train.src.lengths()
    indices = np.argsort(lengths, kind="stable")[::37][:5]  # five sentences of different lengths
    whole = batch_of(data, indices)
    halves = split_batch(whole)
    expected = [batch_of(data, indices[:3]), batch_of(data, indices[3:])]
    assert len(halves) == 2
    for half, want in zip(halves, expected, strict=True):
        for name in ("src", "tgt_in", "tgt_out"):
            assert torch.equal(getattr(half, name), getattr(want, name)), name
            assert getattr(half, name).is_contiguous()
        assert half.indices.tolist() == want.indices.tolist()
        assert (half.src_tokens, half.tgt_tokens) == (want.src_tokens, want.tgt_tokens)
    assert halves[0].src.size(1) < whole.src.size(1)  # the shorter half lost the longer half's padding
    assert sum(h.tgt_tokens for h in halves) == whole.tgt_tokens
    single = batch_of(data, indices[:1])
    assert split_batch(single) == [single]


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_out_of_memory_retries_the_update_on_half_batches(setup, tmp_path, caplog, where):
    """Two micro-batches: the first (4 sentences) fits and has already put its gradient in place when
    the second (8 sentences) runs out of memory. The update is redone from zero gradients on the four
    halves and equals an update made directly on those halves."""
    _, data = setup
    small, big = np.arange(0, 4), np.arange(4, 12)
    trainer = make_trainer(setup, tmp_path, [batch_of(data, small), batch_of(data, big)])
    seen = run_out_of_memory(trainer, lambda src: src.size(0) > 4, where)
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        metrics = trainer.train_step()
    assert metrics is not None
    assert seen == [4, 8, 2, 2, 4, 4]
    assert (trainer.step, trainer.skipped_updates) == (1, 0)
    tokens = batch_of(data, small).tgt_tokens + batch_of(data, big).tgt_tokens
    assert warnings_of(caplog) == [
        f"update 1 ran out of memory (12 sentences, {tokens} target tokens): retrying it in 4 micro-batches"
    ]

    halves = [batch_of(data, small[:2]), batch_of(data, small[2:]), batch_of(data, big[:4]), batch_of(data, big[4:])]
    direct = make_trainer(setup, tmp_path, halves)
    expected = direct.train_step()
    assert_same_parameters(parameters(trainer), parameters(direct))
    assert metrics == expected
    assert trainer.check_updates() == direct.check_updates()  # the same loss, nll and norm, bit for bit


def test_out_of_memory_on_the_halves_too_skips_the_update(setup, tmp_path, caplog):
    _, data = setup
    batch = batch_of(data, np.arange(0, 4))
    trainer = make_trainer(setup, tmp_path, [batch])
    seen = run_out_of_memory(trainer, lambda src: src.size(0) > 1)
    before = parameters(trainer)
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        assert trainer.train_step() is None
    assert seen == [4, 2]  # the whole batch, then the first half: the update is given up at once
    assert_same_parameters(parameters(trainer), before)
    assert not any(p.grad.any() for p in trainer.model.parameters())  # cleared
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_oom_skips) == (0, 1, 1)
    assert warnings_of(caplog) == [
        f"update 1 ran out of memory (4 sentences, {batch.tgt_tokens} target tokens): retrying it in 2 micro-batches",
        f"update 1 skipped: out of memory even with its batches split in two (4 sentences, {batch.tgt_tokens} target tokens)",
    ]
    seen.clear()
    trainer.objective.forward = TeacherForcedLoss.forward.__get__(trainer.objective)  # memory is back
    assert trainer.train_step() is not None
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_oom_skips) == (1, 1, 0)


def test_out_of_memory_on_every_update_stops_the_run(setup, tmp_path):
    _, data = setup
    trainer = make_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 4))])
    run_out_of_memory(trainer, lambda src: True)
    assert trainer.train_step() is None
    assert trainer.train_step() is None
    with pytest.raises(RepeatedOutOfMemory) as info:
        trainer.train_step()
    assert isinstance(info.value, UserError)
    assert str(info.value) == (
        "3 updates in a row ran out of memory even with their batches split in two (max_skipped_updates=3); "
        "lower batch_tokens. No checkpoint was saved yet (the first save is at update 4)"
    )  # it named <run>/checkpoints, which did not exist
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert (trainer.step, trainer.skipped_updates) == (0, 3)


class TwoRanks(DistContext):
    """Looks distributed to train_step; sums are those of one rank (no process group is needed)."""

    def sum(self, value: float) -> float:
        return value

    def sum_on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor


def test_out_of_memory_under_ddp_is_an_error_not_a_split(setup, tmp_path):
    """A rank that split its batch would make more backward passes than the other ranks wait for."""
    _, data = setup
    batch = batch_of(data, np.arange(0, 4))
    trainer = make_trainer(setup, tmp_path, [batch])
    trainer.dist = trainer.update.dist = TwoRanks(rank=1, world_size=2, joined=True)
    seen = run_out_of_memory(trainer, lambda src: True)
    with pytest.raises(UserError) as info:
        trainer.train_step()
    assert str(info.value) == (
        f"out of memory at update 1 on rank 1 ({batch.tgt_tokens} target tokens); lower batch_tokens "
        "(with several processes a batch cannot be split and retried)"
    )
    assert isinstance(info.value.__cause__, torch.OutOfMemoryError)
    assert seen == [4]


# --- fp16: the grad scaler's skips ------------------------------------------------------------------


def fp16_trainer(setup: tuple, tmp_path: Path, batches: list[Batch], monkeypatch: pytest.MonkeyPatch) -> Trainer:
    """make_trainer with precision=fp16 (a grad scaler, whose logic runs on a CPU too): given as the
    run's precision, past the precision choice, which refuses fp16 on a CPU."""
    cfg, data = setup
    cfg = cfg.copy()
    cfg.precision = "fp16"
    torch.manual_seed(0)
    fp16 = PrecisionChoice("fp16", "test on a CPU")
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")),
        tmp_path / "run",
        data,
        torch.device("cpu"),
        DistContext(),
        precision=fp16,
    )
    trainer.stream.next_update = lambda *_args: list(batches)
    assert trainer.scaler.is_enabled()
    return trainer


def test_fp16_with_a_nan_loss_on_every_update_stops(setup, tmp_path, caplog, monkeypatch):
    """Regression: under fp16 every skip was exempt from max_skipped_updates, so a forward pass that
    overflows on every batch skipped for ever without an update."""
    _, data = setup
    trainer = fp16_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 8))], monkeypatch)
    poison(trainer, set(range(1, 100)), "nan_loss")
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER), pytest.raises(NonFiniteLoss, match="3 updates in a row"):
        for _ in range(10):
            trainer.train_step()
            trainer.check_updates()
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_skips) == (3, 3, 3)


def test_fp16_overflowing_gradients_are_the_scalers_business(setup, tmp_path, caplog, monkeypatch):
    """A finite loss with infinite gradients is what the grad scaler skips while it finds its scale:
    counted as skipped, never toward the limit, and the scale halves each time."""
    _, data = setup
    trainer = fp16_trainer(setup, tmp_path, [batch_of(data, np.arange(0, 8))], monkeypatch)
    poison(trainer, set(range(1, 6)), "inf_grad")  # 5 > max_skipped_updates=3
    scale = trainer.scaler.get_scale()
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        for _ in range(6):
            trainer.train_step()
        outcomes = [not r.skipped for r in trainer.check_updates()]
    assert outcomes == [False] * 5 + [True]
    assert (trainer.step, trainer.skipped_updates, trainer.consecutive_skips) == (6, 5, 0)
    assert trainer.scaler.get_scale() == scale / 2**5


def test_resuming_with_fp16_a_run_that_was_not_fp16_starts_a_fresh_scaler(setup, tmp_path, caplog, monkeypatch):
    """Regression: GradScaler.load_state_dict({}) raised (a disabled scaler saves nothing)."""
    _, data = setup
    batches = [batch_of(data, np.arange(0, 8))]
    fp32 = make_trainer(setup, tmp_path, batches)
    fp32.train_step()
    payload = fp32.training_state()
    assert payload.scaler == {}
    resumed = fp16_trainer(setup, tmp_path, batches, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=LOOP_LOGGER):
        resumed.restore(payload)
    assert warnings_of(caplog) == [
        "the checkpoint has no grad scaler state (not trained with fp16): starting a fresh one"
    ]
    assert resumed.step == 1 and resumed.scaler.get_scale() == torch.amp.GradScaler("cpu").get_scale()
    assert resumed.train_step() is not None
