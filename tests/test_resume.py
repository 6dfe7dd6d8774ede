"""Exact resume: a run stopped (or killed) and resumed ends with the same parameters, bit for bit."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging
from numerics import assert_equal
from omegaconf import OmegaConf

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.cli.train import train
from seq2seq.config import UserError

DETERMINISTIC = [*TINY_TRAIN, "deterministic=true", "model.dropout=0.2"]


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert_equal(a[name], b[name], name)


def test_stopped_and_resumed_run_matches_uninterrupted_run(tmp_path: Path) -> None:
    train(compose_config("train", DETERMINISTIC), tmp_path / "straight")
    train(compose_config("train", [*DETERMINISTIC, "max_steps=4"]), tmp_path / "stopped")
    halfway = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert halfway["step"] == 4
    summary = train(
        compose_config("train", [*DETERMINISTIC, f"resume={tmp_path / 'stopped'}"]),
        tmp_path / "stopped",
        overrides=[f"resume={tmp_path / 'stopped'}", "max_steps=8"],
    )
    assert summary["step"] == 8
    assert_bitwise_equal(final_parameters(tmp_path / "straight"), final_parameters(tmp_path / "stopped"))
    straight = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    resumed = load_checkpoint(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert straight["data"] == resumed["data"] and straight["best"] == resumed["best"]


def test_resume_keeps_the_saved_config_and_refuses_model_changes(tmp_path: Path) -> None:
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2"]), tmp_path / "run")
    resume = f"resume={tmp_path / 'run'}"
    # The command line composes the default config, but a resumed run keeps what it was trained with.
    with pytest.raises(UserError, match="model=small.*init_from"):
        train(compose_config("train", [resume, "model=small"]), tmp_path / "run", overrides=[resume, "model=small"])
    with pytest.raises(UserError, match="not with model.ffn_dim: 256 in the checkpoint, 32 given"):
        train(compose_config("train", [resume]), tmp_path / "run", overrides=[resume, "model.ffn_dim=32"])


def test_a_resumed_auto_precision_run_says_what_auto_chose_not_as_asked(tmp_path: Path) -> None:
    # It logged "precision: bf16 (as asked (...))" although the user had asked for auto.
    auto = [*[o for o in TINY_TRAIN if not o.startswith("precision=")], "max_steps=2", "valid_every=2"]
    _, first = train_logging(compose_config("train", auto), tmp_path / "run")
    (started,) = [line for line in first if line.startswith("precision: ")]
    chosen, why = started.removeprefix("precision: ").split(" ", 1)
    assert why.startswith("(auto: ")
    resume = f"resume={tmp_path / 'run'}"
    cfg = compose_config("train", [*auto, resume])
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("seq2seq.train")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        train(cfg, tmp_path / "run", overrides=[resume, "max_steps=4"])
    finally:
        logger.removeHandler(handler)
    (resumed,) = [line for line in lines if line.startswith("precision: ")]
    assert resumed == f"precision: {chosen} (resumed; precision=auto chose it when the run started: {why[1:-1]})"
    assert "as asked" not in resumed


def test_init_from_starts_a_new_run_from_the_weights_only(tmp_path: Path) -> None:
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2"]), tmp_path / "base")
    source = tmp_path / "base" / "checkpoints" / "last.pt"
    summary = train(
        compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2", f"init_from={source}"]),
        tmp_path / "tuned",
    )
    assert summary["step"] == 2  # a fresh step count: it is a new run, not a resumed one
    with pytest.raises(UserError, match="model config differs"):
        train(compose_config("train", [*TINY_TRAIN, "model.ffn_dim=32", f"init_from={source}"]), tmp_path / "other")


def test_init_from_takes_the_weights_only_file_training_writes(tmp_path: Path) -> None:
    """<run>/model/ (written at the end of training, of best.pt) starts a run exactly as best.pt does."""
    train(compose_config("train", [*DETERMINISTIC, "max_steps=2", "valid_every=2"]), tmp_path / "base")
    weights = tmp_path / "base" / "model"
    for name, source in [("from_weights", weights), ("from_file", weights / "model.safetensors")]:
        train(compose_config("train", [*DETERMINISTIC, "max_steps=2", f"init_from={source}"]), tmp_path / name)
    best = tmp_path / "base" / "checkpoints" / "best.pt"
    train(compose_config("train", [*DETERMINISTIC, "max_steps=2", f"init_from={best}"]), tmp_path / "from_best")
    train(compose_config("train", [*DETERMINISTIC, "max_steps=2"]), tmp_path / "from_scratch")
    assert_bitwise_equal(final_parameters(tmp_path / "from_weights"), final_parameters(tmp_path / "from_best"))
    assert_bitwise_equal(final_parameters(tmp_path / "from_file"), final_parameters(tmp_path / "from_best"))
    scratch, tuned = final_parameters(tmp_path / "from_scratch"), final_parameters(tmp_path / "from_best")
    assert not torch.equal(scratch["src_embed.weight"], tuned["src_embed.weight"])


KILLED_RUN = [*DETERMINISTIC, "max_steps=24", "save_every=2", "valid_every=8"]


def _train_command(run_dir: Path, extra: list[str], ranks: int = 1) -> list[str]:
    overrides = [*KILLED_RUN, f"hydra.run.dir={run_dir}"]
    if ranks == 1:
        return [str(Path(sys.executable).parent / "seq2seq-train"), *overrides, *extra]
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc_per_node={ranks}"]
    return [*torchrun, "-m", "seq2seq.cli.train", *overrides, *extra]


# Real processes killed at random moments (25 s with one rank): by default, each thing it checks is checked
# in this process, an update or a save interrupted where the kill would land:
# test_stopped_and_resumed_run_matches_uninterrupted_run (the same parameters, bit for bit),
# test_a_run_killed_while_saving_gets_the_checkpoints_it_owed_on_resume (a kill mid-write) and
# test_a_killed_run_resumes_into_the_same_tensorboard_steps (the steps logged after the last checkpoint).
@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_killed_run_resumes_to_the_same_parameters(tmp_path: Path, ranks: int) -> None:
    """SIGKILL a real training run (with 2 ranks: torchrun and its two gloo workers) at random moments after it has made progress (checkpoints are written every 2 updates, so
    some kills land mid-write), resume each time, and compare with a run never interrupted. With 2
    ranks the dropout masks of rank 1 depend on its own RNG state being saved and restored."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if ranks == 1:  # the uninterrupted run in this process: starting one costs seconds
        train(compose_config("train", KILLED_RUN), tmp_path / "straight")
    else:
        command = _train_command(tmp_path / "straight", [], ranks)
        straight = subprocess.run(command, env=env, capture_output=True, text=True)
        assert straight.returncode == 0, straight.stderr[-2000:]
    run_dir = tmp_path / "killed"
    last = run_dir / "checkpoints" / "last.pt"
    rng = random.Random(7)
    kills: list[int] = []
    command = _train_command(run_dir, [], ranks)
    resumed_launches = 0
    for _ in range(2):
        resumed_launches += "resume=" in command[-1]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done_before = load_checkpoint(last)["step"] if last.exists() else 0
        deadline = time.monotonic() + 120
        while process.poll() is None and time.monotonic() < deadline:  # wait for a new checkpoint
            if last.exists() and _step_or_zero(last) > done_before:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.6))  # then kill at a random moment: between updates or mid-write
        if process.poll() is None:
            _kill_with_children(process)
            kills.append(_step_or_zero(last))
        command = _train_command(run_dir, [f"resume={run_dir}"], ranks) if last.exists() else command
    resumed_launches += "resume=" in command[-1]
    finish = subprocess.run(command, env=env, capture_output=True, text=True)
    assert finish.returncode == 0, finish.stderr[-2000:]
    print(f"killed after checkpoints at steps {kills}")
    assert_bitwise_equal(final_parameters(tmp_path / "straight"), final_parameters(run_dir))
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 24
    # The resumed segments appended to one TensorBoard run: every step once, as in the straight run
    # (steps logged after the last checkpoint of a killed segment were purged on resume).
    assert scalar_steps(run_dir, "train/loss") == scalar_steps(tmp_path / "straight", "train/loss")
    assert scalar_steps(run_dir, "valid/bleu") == scalar_steps(tmp_path / "straight", "valid/bleu")
    log = (run_dir / "train.log").read_text()
    assert log.count("resumed ") == resumed_launches * ranks and "reached max_steps=24" in log  # every rank logs it
    assert len(load_checkpoint(last)["rng"]) == ranks


def test_a_killed_run_resumes_into_the_same_tensorboard_steps(tmp_path: Path, monkeypatch) -> None:
    """A run killed after it logged update 6 but saved only update 4's checkpoint: the resumed run purges
    the events after its checkpoint, so TensorBoard shows every step once, as in a run never interrupted."""
    import seq2seq.train.trainer as loop

    train(compose_config("train", DETERMINISTIC), tmp_path / "straight")
    run_dir = tmp_path / "killed"
    step = loop.Trainer.train_step

    def killed_before_update_7(self):
        if self.step == 6:
            raise Killed
        return step(self)

    monkeypatch.setattr(loop.Trainer, "train_step", killed_before_update_7)
    with pytest.raises(Killed):
        train(compose_config("train", DETERMINISTIC), run_dir)
    monkeypatch.undo()
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 4
    assert 6 in scalar_steps(run_dir, "train/loss")  # logged past the checkpoint: what the resume must drop
    resume = f"resume={run_dir}"
    train(compose_config("train", [*DETERMINISTIC, resume]), run_dir, overrides=[resume])
    assert_bitwise_equal(final_parameters(tmp_path / "straight"), final_parameters(run_dir))
    for tag in ("train/loss", "valid/bleu"):
        assert scalar_steps(run_dir, tag) == scalar_steps(tmp_path / "straight", tag), tag


def _kill_with_children(process: subprocess.Popen) -> None:
    """SIGKILL a process and its children: torchrun starts each worker in a session of its own, so
    they outlive it (and go on training into the run directory) unless they are killed one by one."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    process.send_signal(signal.SIGKILL)  # first, so that it cannot react to its workers' deaths
    for child in children:
        try:
            os.kill(int(child), signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()
    for child in children:  # gone before the next segment starts writing into the same directory
        while Path(f"/proc/{child}").exists() and "zombie" not in Path(f"/proc/{child}/status").read_text():
            time.sleep(0.01)


def _step_or_zero(path: Path) -> int:
    """The step of a checkpoint being written right now may not be readable yet: count that as none."""
    try:
        return load_checkpoint(path)["step"]
    except UserError:
        return 0


def scalar_steps(run_dir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


def test_a_checkpoint_with_one_random_state_still_resumes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Checkpoints from before per-rank states hold one dict (upgraded as they are read); a
    checkpoint of another world size warns."""
    from seq2seq.artifacts.checkpoint import TrainingState, upgrade
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.rng import rng_state
    from seq2seq.train.trainer import Trainer

    cfg = compose_config("train", TINY_TRAIN)
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path, prepare_data(cfg.data), torch.device("cpu"), DistContext()
    )
    torch.manual_seed(3)
    state = trainer.training_state()
    expected = torch.rand(4)
    current = state.to_payload()
    for payload in ({**current, "rng": state.rng[0]}, current):  # the old format, then the new one
        torch.manual_seed(99)
        trainer.restore(TrainingState.from_payload(upgrade(payload), tmp_path))
        assert torch.equal(torch.rand(4), expected)
    torch.manual_seed(99)
    with caplog.at_level("WARNING", logger="seq2seq.train"):
        trainer.restore(dataclasses.replace(state, rng=[state.rng[0], rng_state()]))  # saved by 2 ranks
    assert torch.equal(torch.rand(4), expected)  # rank 0 takes rank 0's
    assert "the random state of 2 rank(s), this run has 1" in caplog.text


def test_max_minutes_counts_training_time_over_restarts(tmp_path: Path) -> None:
    """A resumed run carries on the clock of its checkpoint: with its budget already spent, it stops at
    once instead of getting max_minutes afresh."""
    train(compose_config("train", [*TINY_TRAIN, "max_steps=4"]), tmp_path / "run")
    spent = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["elapsed_seconds"]
    assert spent > 0
    resume = [f"resume={tmp_path / 'run'}", "max_steps=100", f"max_minutes={spent / 60.0}"]
    summary = train(compose_config("train", [*TINY_TRAIN, *resume]), tmp_path / "run", overrides=resume)
    assert summary["reason"] == f"used max_minutes={spent / 60.0}"
    assert summary["step"] == 4
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["elapsed_seconds"] >= spent


def test_time_driven_schedule_reads_the_run_clock(tmp_path: Path) -> None:
    """linear_to_zero with max_minutes: 30 s into a 1-minute budget, past warmup, the rate is half the peak."""
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.trainer import Trainer

    overrides = [*TINY_TRAIN, "optim.schedule=linear_to_zero", "optim.lr=1e-3", "optim.warmup=1", "max_minutes=1"]
    cfg = compose_config("train", [*overrides, "max_steps=null"])
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path, prepare_data(cfg.data), torch.device("cpu"), DistContext()
    )
    trainer.budget.started = time.monotonic() - 30.0
    assert trainer.budget.used(5) == pytest.approx(0.5, abs=0.01)
    assert trainer.optimizer.lr_at(5) == pytest.approx(0.5e-3, rel=0.02)
    trainer.budget.elapsed_before = 30.0  # and as much again before a restart: the budget is spent
    assert trainer.optimizer.lr_at(5) == 0.0


class Killed(BaseException):
    """Stands for SIGKILL: nothing of the process runs after it (no save, no handler)."""


@pytest.mark.parametrize("victim", ["step_8.pt", "best.pt"])
def test_a_run_killed_while_saving_gets_the_checkpoints_it_owed_on_resume(tmp_path, monkeypatch, caplog, victim):
    # Killed while writing step_N.pt or best.pt, the run used to have last.pt of that update already,
    # so the resumed run never wrote them, and logged a best.pt that did not exist.
    import seq2seq.train.trainer as loop

    overrides = [*DETERMINISTIC, "best_metric=loss"]
    save = loop.save_training_state

    def killed_at_update_8(state, path):
        if path.name == victim and state.step == 8:
            (path.parent / f".{victim}.abc123.tmp").write_bytes(b"half a checkpoint")  # what a kill leaves
            raise Killed
        save(state, path)

    monkeypatch.setattr(loop, "save_training_state", killed_at_update_8)
    with pytest.raises(Killed):
        train(compose_config("train", overrides), tmp_path / "run")
    monkeypatch.undo()
    checkpoints = tmp_path / "run" / "checkpoints"
    with caplog.at_level("INFO", logger="seq2seq.train"):
        summary = train(
            compose_config("train", [*overrides, f"resume={tmp_path / 'run'}"]),
            tmp_path / "run",
            overrides=[f"resume={tmp_path / 'run'}"],
        )
    assert summary["step"] == 8 and summary["best"]["step"] == 8
    assert load_checkpoint(checkpoints / "step_8.pt")["step"] == 8
    assert load_checkpoint(checkpoints / "best.pt")["step"] == 8
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.pt", "last.pt", "step_4.pt", "step_8.pt"]
    assert f"best checkpoint: {checkpoints / 'best.pt'} (loss" in caplog.text


def test_ctrl_c_says_how_to_translate_and_how_to_resume(tmp_path, monkeypatch):
    import seq2seq.train.trainer as loop

    step = loop.Trainer.train_step

    def interrupted_after_update_2(self):
        metrics = step(self)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the handler asks the loop to stop after this update
        return metrics

    monkeypatch.setattr(loop.Trainer, "train_step", interrupted_after_update_2)
    run = tmp_path / "my rün"  # the printed commands broke on the space, and Hydra on the ü
    summary, lines = train_logging(compose_config("train", TINY_TRAIN), run)
    # Stopped after the update in progress, saved, exports skipped, and 128 + SIGINT for the command.
    assert summary["step"] == 2 and summary["exit_status"] == 130
    assert (run / "checkpoints" / "last.pt").is_file()
    assert not (run / "ctranslate2").exists() and not (run / "model").exists()
    assert "exports for translation not written (stopped by signal); translation reads the checkpoint" in lines
    assert lines[-2:] == [
        f"translate with:  seq2seq-translate run='{run}' < input.txt > output.txt",
        f"resume with:     seq2seq-train \"resume='{run}'\"",
    ]
    # What the shell passes on is what each command reads back.
    from seq2seq.cli.common import parse_command_line, parse_key_values
    from seq2seq.config import TranslateConfig

    translate_words, resume_words = (shlex.split(line.split(":", 1)[1]) for line in lines[-2:])
    assert parse_key_values(translate_words[1:2], TranslateConfig).run == str(run)
    assert parse_command_line(resume_words[1:])[1][0].value() == str(run)


@pytest.mark.parametrize("path", ["/tmp/it's", "/tmp/back\\slash\\", "/tmp/$HOME x", 'a"b c'])
def test_the_printed_resume_command_gives_hydra_the_path_back(path):
    from seq2seq.cli.common import parse_command_line
    from seq2seq.train.command import hydra_argument

    assert parse_command_line(shlex.split(hydra_argument("resume", path)))[1][0].value() == path


def test_a_run_stops_when_it_reaches_its_target_and_says_so(tmp_path):
    # best_metric=loss with a target every validation meets: the run stops at the first validation.
    cfg = compose_config("train", [*TINY_TRAIN, "target_metric=loss", "target=1000", "patience=null"])
    summary, lines = train_logging(cfg, tmp_path / "run")
    assert summary["step"] == 4 and summary["reason"] == "reached the target loss <= 1000"
    assert lines[-2] == f"target reached: loss {summary['metrics']['loss']:.2f} (target 1000) at update 4"


def test_a_run_that_misses_its_target_says_so_in_its_last_lines(tmp_path):
    # The built-in demo stopped on its clock at 3.2% exact match and said nothing about it.
    cfg = compose_config("train", [*TINY_TRAIN, "best_metric=bleu", "target=100", "patience=null"])
    summary, lines = train_logging(cfg, tmp_path / "run")
    assert summary["step"] == 8
    accuracy = summary["metrics"]["accuracy"]
    assert accuracy < 100
    assert lines[-2] == (
        f"target NOT reached: accuracy {accuracy:.2f} at the last validation, target 100 (reached max_steps=8)"
    )


def test_the_built_in_task_ends_on_its_target_not_on_a_clock():
    cfg = compose_config("train", [])
    assert (cfg.target_metric, cfg.target, cfg.max_minutes) == ("accuracy", 95, None)
    assert cfg.max_steps is not None  # the cap


def test_the_end_summary_never_names_a_best_checkpoint_that_is_not_there(tmp_path, caplog):
    train(compose_config("train", TINY_TRAIN), tmp_path / "run")
    (tmp_path / "run" / "checkpoints" / "best.pt").unlink()
    caplog.clear()  # only the resumed run's summary (the first run's may have been captured too)
    with caplog.at_level("INFO", logger="seq2seq.train"):
        train(
            compose_config("train", [*TINY_TRAIN, f"resume={tmp_path / 'run'}"]),
            tmp_path / "run",
            overrides=[f"resume={tmp_path / 'run'}"],
        )  # already at max_steps: it stops at once and prints the end summary
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    assert f"best checkpoint: {best} (" not in caplog.text
    assert f"best checkpoint: {best} was not written" in caplog.text


def test_the_final_validation_is_kept_inside_max_minutes(tmp_path: Path) -> None:
    """The latest validation's duration is kept back from max_minutes: training stops that much before
    the deadline (the final validation then ends by it), and linear_to_zero reaches zero there."""
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.trainer import Trainer

    overrides = [*TINY_TRAIN, "optim.schedule=linear_to_zero", "optim.warmup=1", "max_minutes=1", "max_steps=null"]
    cfg = compose_config("train", overrides)
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")), tmp_path, prepare_data(cfg.data), torch.device("cpu"), DistContext()
    )
    trainer.budget.started = time.monotonic() - 45.0  # 0.75 of the 1-minute budget spent
    assert trainer.stop_reason() is None
    trainer.budget.validation_minutes = 0.1
    assert trainer.budget.used(5) == pytest.approx(0.75 / 0.9, abs=0.01)
    assert trainer.stop_reason() is None
    trainer.budget.validation_minutes = 0.3  # a validation takes longer than what is left
    assert trainer.stop_reason() == "used max_minutes=1.0"
    assert trainer.optimizer.lr_at(5) == 0.0


def test_resume_with_init_from_is_refused_before_anything_is_written(tmp_path):
    # init_from was dropped without a word: the run resumed from its own last.pt.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.pt").write_bytes(b"")  # all the command-line check looks at
    message = (
        f"config error: init_from='{tmp_path / 'x.pt'}': cannot be combined with resume "
        "(a resumed run continues from its own last.pt)"
    )
    from seq2seq.cli.train import check_run_directory

    with pytest.raises(UserError) as info:  # before Hydra writes .hydra/resumed-* into the run
        check_run_directory([f"resume={run}", f"init_from={tmp_path / 'x.pt'}"])
    assert str(info.value) == message
    with pytest.raises(UserError) as info:  # train(cfg), called from Python
        train(compose_config("train", [*TINY_TRAIN, f"resume={run}", f"init_from={tmp_path / 'x.pt'}"]), run)
    assert str(info.value) == message
    assert sorted(p.name for p in run.rglob("*")) == ["checkpoints", "last.pt"]


def test_a_resume_names_each_model_key_it_would_change_with_both_values(tmp_path):
    """It said only "the model config differs from the checkpoint's", as init_from= no longer does."""
    from seq2seq.config import as_dict
    from seq2seq.train.resume import resumed_config

    saved = as_dict(compose_config("train", TINY_TRAIN))
    resume = f"resume={tmp_path}"
    cfg = compose_config("train", [resume])
    with pytest.raises(UserError) as info:
        resumed_config(cfg.resume, [resume, "model.d_model=128", "model.heads=2"], saved)
    d_model, heads = saved["model"]["d_model"], saved["model"]["heads"]
    assert f"model.d_model: {d_model} in the checkpoint, 128 given" in str(info.value)
    assert f"model.heads: {heads} in the checkpoint, 2 given" in str(info.value)


def _another_value(value, annotation: str):
    """A value of the key's type other than `value`, as a command line writes it."""
    if isinstance(value, bool):
        return str(not value).lower()
    if isinstance(value, int):
        return str(value + 1)
    if isinstance(value, float):
        return str(value + 1.5)
    if "CorpusConfig" in annotation:
        return "[{name: extra, kind: tsv, train: extra.tsv}]"
    if "list" in annotation:
        return "[aa-bb]"
    if value is None and "int" in annotation:
        return "1"
    return "elsewhere" if value != "elsewhere" else "other"


def test_every_data_and_model_key_a_resume_cannot_honour_is_refused_by_name(tmp_path):
    """data.vocab_size=400 was ignored without a word (the run went on with its 300 entries): each data.*
    and model.* key is either honoured by a resume (the allow-list, its new value used) or refused,
    the key named with both values."""
    from seq2seq.config import DataConfig, ModelConfig, as_dict
    from seq2seq.train import resume as resume_module

    saved = as_dict(compose_config("train", TINY_TRAIN))
    resume = f"resume={tmp_path}"
    cfg = compose_config("train", [resume])
    allowed = resume_module.RESUMABLE_KEYS
    schema = {f"model.{f.name}": f for f in dataclasses.fields(ModelConfig)}
    for f in dataclasses.fields(DataConfig):  # a nested section (data.clean_settings) by each of its keys
        inner = f.default_factory() if dataclasses.is_dataclass(f.type) or callable(f.default_factory) else None
        if dataclasses.is_dataclass(inner):
            schema |= {f"data.{f.name}.{g.name}": g for g in dataclasses.fields(inner)}
        else:
            schema[f"data.{f.name}"] = f
    assert allowed <= schema.keys()  # the allow-list names keys the schema has
    assert not any(key.startswith("model.") for key in allowed)  # the checkpoint's model is the model
    started = {key: OmegaConf.select(OmegaConf.create(saved), key) for key in schema}
    changes = {key: _another_value(started[key], str(field.type)) for key, field in schema.items()}
    honoured = resume_module.resumed_config(
        cfg.resume, [resume, *(f"{k}={changes[k]}" for k in sorted(allowed))], saved
    )
    for key in allowed:
        assert str(OmegaConf.select(honoured, key)) == changes[key], key
    # A list of directions makes the run multilingual: check_same_directions's words, the same facts.
    with pytest.raises(UserError, match=r"data\.directions=\['aa-bb'\] differs .* data\.directions=None"):
        resume_module.resumed_config(cfg.resume, [resume, "data.directions=[aa-bb]"], saved)
    refused = [key for key in schema if key not in allowed and key != "data.directions"]
    with pytest.raises(UserError) as info:  # every one of them named in the one line, with both values
        resume_module.resumed_config(cfg.resume, [resume, *(f"{k}={changes[k]}" for k in refused)], saved)
    message = str(info.value)
    assert len(message.splitlines()) == 1
    for key in refused:
        shown = f"{key}: {_as_written(started[key])} in the checkpoint, "
        if key != "data.corpora":  # a list of sections is shown as the resume reads it, not as typed here
            shown += f"{changes[key]} given"
        assert shown in message, key


def _as_written(value) -> str:
    """A saved value as the command line writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _parallel_corpus(root: Path, targets: list[str]) -> list[str]:
    """A tiny parallel_files corpus of the built-in task's kind; its overrides."""
    from seq2seq.config import DataConfig
    from seq2seq.data.builtin import reverse_task

    root.mkdir(parents=True, exist_ok=True)
    task = reverse_task(DataConfig(task_train_size=200, task_valid_size=10))
    files = {"train.src": task["train"][0], "train.tgt": targets, "valid.src": task["valid"][0]}
    files["valid.tgt"] = task["valid"][1]
    for name, lines in files.items():
        (root / name).write_text("\n".join(lines) + "\n")
    return [
        "data.kind=parallel_files",
        *(f"data.{split}_{side}={root / f'{split}.{side}'}" for split in ("train", "valid") for side in ("src", "tgt")),
    ]


def test_a_resume_refuses_a_corpus_file_that_changed_since_the_run_started(tmp_path):
    """The training targets replaced (with French) were tokenized afresh and trained on without a word."""
    from seq2seq.config import DataConfig
    from seq2seq.data.builtin import reverse_task

    targets = reverse_task(DataConfig(task_train_size=200, task_valid_size=10))["train"][1]
    corpus = _parallel_corpus(tmp_path / "corpus", targets)
    run = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, *corpus, "max_steps=2", "valid_every=2"]), run)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    replaced = tmp_path / "corpus" / "train.tgt"
    replaced.write_text("".join(f"une phrase {i}\n" for i in range(len(targets))))
    overrides = [f"resume={run}", "max_steps=4"]
    with pytest.raises(UserError) as info:
        train(compose_config("train", overrides), run, overrides=overrides)
    message = str(info.value)
    assert str(replaced) in message and "data.train_tgt" in message and len(message.splitlines()) == 1
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    replaced.unlink()
    with pytest.raises(UserError, match=rf"resume: {replaced} \(data\.train_tgt\) .*; cannot be read now\)"):
        train(compose_config("train", overrides), run, overrides=overrides)
    # The same corpus elsewhere is the same corpus: data.* paths may move with it.
    vocab = load_checkpoint(run / "checkpoints" / "last.pt")["vocab"]
    moved = _parallel_corpus(tmp_path / "moved", targets)
    overrides = [f"resume={run}", "max_steps=4", *moved]
    assert train(compose_config("train", overrides), run, overrides=overrides)["step"] == 4
    assert load_checkpoint(run / "checkpoints" / "last.pt")["vocab"] == vocab  # the same tokenizer, rebuilt


def test_a_resume_reads_each_corpus_file_once_to_hash_it(tmp_path, monkeypatch):
    """Regression: a resume hashed the whole corpus twice, once to check it against the checkpoint's
    record and again to key the cache (a large corpus's SHA-256 costs minutes)."""
    import hashlib

    from seq2seq.config import DataConfig
    from seq2seq.data.builtin import reverse_task

    targets = reverse_task(DataConfig(task_train_size=200, task_valid_size=10))["train"][1]
    corpus = _parallel_corpus(tmp_path / "corpus", targets)
    run = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, *corpus, "max_steps=2", "valid_every=2"]), run)
    hashed: list[str] = []
    file_digest = hashlib.file_digest

    def counting(handle, digest):
        hashed.append(Path(handle.name).name)
        return file_digest(handle, digest)

    monkeypatch.setattr(hashlib, "file_digest", counting)
    overrides = [f"resume={run}", "max_steps=4"]
    assert train(compose_config("train", overrides), run, overrides=overrides)["step"] == 4
    corpus_files = sorted(name for name in hashed if name.startswith(("train.", "valid.")))
    assert corpus_files == ["train.src", "train.tgt", "valid.src", "valid.tgt"]
