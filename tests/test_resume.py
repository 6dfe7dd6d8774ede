"""Exact resume: a run stopped (or killed) and resumed ends with the same parameters, bit for bit."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging

from seq2seq.checkpoint import load_checkpoint
from seq2seq.config import UserError
from seq2seq.train.run import train

DETERMINISTIC = [*TINY_TRAIN, "deterministic=true", "model.dropout=0.2"]


def final_parameters(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "checkpoints" / "last.pt")["model"]


def assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


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
    with pytest.raises(UserError, match="model config differs"):
        train(compose_config("train", [resume]), tmp_path / "run", overrides=[resume, "model.ffn_dim=32"])


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


def _train_command(run_dir: Path, extra: list[str]) -> list[str]:
    overrides = [*DETERMINISTIC, "max_steps=40", "save_every=2", "valid_every=12", f"hydra.run.dir={run_dir}"]
    return [str(Path(sys.executable).parent / "seq2seq-train"), *overrides, *extra]


def test_killed_run_resumes_to_the_same_parameters(tmp_path: Path) -> None:
    """SIGKILL a real training process at random moments after it has made progress (checkpoints are
    written every 2 updates, so some kills land mid-write), resume each time, and compare with a run
    never interrupted."""
    env = {**os.environ}
    straight = subprocess.run(_train_command(tmp_path / "straight", []), env=env, capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr[-2000:]
    run_dir = tmp_path / "killed"
    last = run_dir / "checkpoints" / "last.pt"
    rng = random.Random(7)
    kills: list[int] = []
    command = _train_command(run_dir, [])
    resumed_launches = 0
    for _ in range(3):
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
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills.append(_step_or_zero(last))
        command = _train_command(run_dir, [f"resume={run_dir}"]) if last.exists() else command
    resumed_launches += "resume=" in command[-1]
    finish = subprocess.run(command, env=env, capture_output=True, text=True)
    assert finish.returncode == 0, finish.stderr[-2000:]
    print(f"killed after checkpoints at steps {kills}")
    assert_bitwise_equal(final_parameters(tmp_path / "straight"), final_parameters(run_dir))
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 40
    # The resumed segments appended to one TensorBoard run: every step once, as in the straight run
    # (steps logged after the last checkpoint of a killed segment were purged on resume).
    assert scalar_steps(run_dir, "train/loss") == scalar_steps(tmp_path / "straight", "train/loss")
    assert scalar_steps(run_dir, "valid/bleu") == scalar_steps(tmp_path / "straight", "valid/bleu")
    log = (run_dir / "train.log").read_text()
    assert log.count("resumed ") == resumed_launches and "reached max_steps=40" in log


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


class Killed(BaseException):
    """Stands for SIGKILL: nothing of the process runs after it (no save, no handler)."""


@pytest.mark.parametrize("victim", ["step_8.pt", "best.pt"])
def test_a_run_killed_while_saving_gets_the_checkpoints_it_owed_on_resume(tmp_path, monkeypatch, caplog, victim):
    # Killed while writing step_N.pt or best.pt, the run used to have last.pt of that update already,
    # so the resumed run never wrote them, and logged a best.pt that did not exist.
    import seq2seq.train.loop as loop

    overrides = [*DETERMINISTIC, "best_metric=loss"]
    save = loop.atomic_save

    def killed_at_update_8(payload, path):
        if path.name == victim and payload["step"] == 8:
            (path.parent / f".{victim}.abc123.tmp").write_bytes(b"half a checkpoint")  # what a kill leaves
            raise Killed
        save(payload, path)

    monkeypatch.setattr(loop, "atomic_save", killed_at_update_8)
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
    import seq2seq.train.loop as loop

    step = loop.Trainer.train_step

    def interrupted_after_update_2(self):
        metrics = step(self)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # the handler asks the loop to stop after this update
        return metrics

    monkeypatch.setattr(loop.Trainer, "train_step", interrupted_after_update_2)
    summary, lines = train_logging(compose_config("train", TINY_TRAIN), tmp_path / "run")
    assert summary["step"] == 2
    assert lines[-2:] == [
        f"translate with:  seq2seq-translate run={tmp_path / 'run'} < input.txt > output.txt",
        f"resume with:     seq2seq-train resume={tmp_path / 'run'}",
    ]


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
    with caplog.at_level("INFO", logger="seq2seq.train"):
        train(
            compose_config("train", [*TINY_TRAIN, f"resume={tmp_path / 'run'}"]),
            tmp_path / "run",
            overrides=[f"resume={tmp_path / 'run'}"],
        )  # already at max_steps: it stops at once and prints the end summary
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    assert f"best checkpoint: {best} (" not in caplog.text
    assert f"best checkpoint: {best} was not written" in caplog.text
