"""max_minutes and stop signals hold on a slow, shared machine: a run ends by its budget (final
validation included), and Ctrl-C / SIGTERM stop it after the update in progress with the shell's exit
status. Time is a fake clock that each update and each translated sentence advance, so the tests are
exact on any machine, however loaded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TINY_TRAIN, compose_config, train_logging

import seq2seq.train.trainer as loop
import seq2seq.train.update as update
from seq2seq.inference.translator import Translator

UPDATE_SECONDS = 7.0  # an update beside another job on a slow CPU
SECONDS_PER_SENTENCE = 0.5  # greedy translation of one validation sentence, as slow


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def slow_machine(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(loop.Trainer, "clock", staticmethod(clock))
    apply_update, translate = update.Update._apply, Translator.translate

    def slow_update(self, *args):
        clock.now += UPDATE_SECONDS
        apply_update(self, *args)

    def slow_translate(self, sources, *args, **kwargs):
        clock.now += SECONDS_PER_SENTENCE * len(sources)
        return translate(self, sources, *args, **kwargs)

    monkeypatch.setattr(update.Update, "_apply", slow_update)
    monkeypatch.setattr(Translator, "translate", slow_translate)
    return clock


@pytest.mark.parametrize("valid_every", [1000, 3])  # the final validation unmeasured / measured before
def test_max_minutes_holds_with_slow_updates_and_a_slow_final_validation(tmp_path, slow_machine, valid_every):
    """Regression: the budget counted updates only, so a run whose validation had never been timed
    validated after its deadline (max_minutes=0.75 ended after 1.8 minutes beside another job)."""
    max_minutes = 1.0
    overrides = [*TINY_TRAIN, "max_steps=null", f"max_minutes={max_minutes}", f"valid_every={valid_every}"]
    overrides += ["save_every=1000", "optim.schedule=linear_to_zero"]
    start = slow_machine.now
    summary, lines = train_logging(compose_config("train", overrides), tmp_path / "run")
    minutes = (slow_machine.now - start) / 60.0
    assert summary["reason"] == f"used max_minutes={max_minutes}"
    # The final validation (20 sentences: 10 s) and the update in progress fit in the budget.
    assert minutes <= max_minutes, (minutes, lines)
    # ... and the budget is used: no more than one update, the validation's estimate and its margin unused.
    assert minutes >= max_minutes - (2 * UPDATE_SECONDS + 2 * 20 * SECONDS_PER_SENTENCE) / 60.0, (minutes, lines)
    assert summary["minutes"] == pytest.approx(minutes)


def test_the_train_metrics_are_timed_on_the_runs_clock(tmp_path, slow_machine):
    """One clock: the throughput TensorBoard shows is measured on Trainer.clock, as max_minutes is. On
    the fake clock an update takes UPDATE_SECONDS, so no window can pass more than a batch's tokens in
    that time; the loop timed its windows with time.monotonic (thousands of tokens per second here)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train_logging(compose_config("train", [*TINY_TRAIN, "max_steps=6", "valid_every=1000"]), tmp_path / "run")
    rates = [e.value for e in EventAccumulator(str(tmp_path / "run" / "tb")).Reload().Scalars("train/tgt_tokens_per_s")]
    assert len(rates) == 4  # updates 1, 2, 4 and 6 (log_every=2)
    assert all(0 < rate <= 512 / UPDATE_SECONDS for rate in rates), rates  # batch_tokens=512


def test_sigterm_ends_the_command_with_status_143_after_saving(tmp_path, run_main, monkeypatch):
    """seq2seq-train's main, sent SIGTERM during update 2: a script can tell an interrupted run (128 + the
    signal) from a finished one. In this process; the whole way from outside: the slow test below."""
    step = loop.Trainer.train_step

    def terminated_in_update_2(self):
        if self.step == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the run's handler asks the loop to stop after this update
        return step(self)

    monkeypatch.setattr(loop.Trainer, "train_step", terminated_in_update_2)
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def not_the_runs(signum, frame):  # SIGTERM's default would end pytest itself, not fail this test
        raise AssertionError("the run did not take SIGTERM")

    signal.signal(signal.SIGTERM, not_the_runs)
    run_dir = tmp_path / "run"
    overrides = [o for o in TINY_TRAIN if not o.startswith("max_steps")] + ["max_steps=100000"]
    try:
        result = run_main(
            ["seq2seq-train", *overrides, "target=null", "patience=null", f"hydra.run.dir={run_dir}"], tmp_path
        )
    finally:  # the run's handlers would outlive it in this process
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert result.returncode == 143, result.stderr[-2000:]
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    log = (run_dir / "train.log").read_text()
    assert "stopped: stopped by signal" in log and "reached max_steps" not in log


# A real process signalled from outside (6 s: its start); the default run's test is the one above.
@pytest.mark.slow
def test_sigterm_from_outside_ends_the_command_with_status_143_after_saving(tmp_path):
    """The real command: a script can tell an interrupted run (128 + the signal) from a finished one."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "SEQ2SEQ_CACHE": str(tmp_path / "cache")}
    # Runs until stopped: no step limit, no target, no patience (a fast machine would finish first).
    overrides = [o for o in TINY_TRAIN if not o.startswith("max_steps")] + ["max_steps=100000"]
    overrides += ["target=null", "patience=null"]
    command = [sys.executable, "-m", "seq2seq.cli.train", *overrides, f"hydra.run.dir={run_dir}"]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = run_dir / "train.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "run directory:" in log.read_text()):  # training has started
        assert time.monotonic() < deadline and process.poll() is None, process.stdout.read().decode()[-2000:]
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0].decode()
    assert process.returncode == 143, output[-2000:]
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert "stopped: stopped by signal" in log.read_text()


def test_training_from_code_gives_the_program_its_signal_handlers_back(tmp_path):
    """Regression: train() from the Python API left its stop handlers installed: the program's Ctrl-C then
    only asked a finished run to stop, and no longer raised KeyboardInterrupt."""

    def mine(signum, frame):
        raise AssertionError("not called")

    before = {number: signal.signal(number, mine) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        train_logging(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2"]), tmp_path / "run")
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def test_the_final_validations_reserve_is_timed_again_on_weights_that_have_learnt(tmp_path, slow_machine, monkeypatch):
    """Regression: the reserve was timed once, after the first update, on weights whose translations
    ran to their length limit, and kept: a run made 17 updates in 2.8 of its 5 minutes, keeping 3.1
    for a final validation that took 0.1. Here translating is slow (1 s a sentence) for the first
    update's weights only and fast (0.05 s) after: the run must go on to use its budget."""
    updates = []
    translate = Translator.translate

    def learning_translate(self, sources, *args, **kwargs):
        slow_machine.now += (1.0 if len(updates) <= 1 else 0.05 - SECONDS_PER_SENTENCE) * len(sources)
        return translate(self, sources, *args, **kwargs)  # slow_translate's 0.5 s are taken back above

    apply_update = update.Update._apply

    def counted_update(self, *args):
        updates.append(1)
        apply_update(self, *args)

    monkeypatch.setattr(update.Update, "_apply", counted_update)
    monkeypatch.setattr(Translator, "translate", learning_translate)
    max_minutes = 2.0
    overrides = [*TINY_TRAIN, "max_steps=null", f"max_minutes={max_minutes}", "valid_every=1000"]
    start = slow_machine.now
    summary, lines = train_logging(compose_config("train", [*overrides, "save_every=1000"]), tmp_path / "run")
    minutes = (slow_machine.now - start) / 60.0
    assert summary["reason"] == f"used max_minutes={max_minutes}"
    assert minutes <= max_minutes, (minutes, lines)
    # The final validation took 1 s: the budget is used but for the update that would not fit and that.
    assert minutes >= max_minutes - (2 * UPDATE_SECONDS + 2) / 60.0, (minutes, lines)
    assert any("the final validation timed again at update" in line for line in lines), lines


def test_a_run_whose_budget_is_spent_before_its_first_update_fails_and_leaves_nothing(tmp_path, run_main):
    """Regression: max_minutes spent on the set-up ended in `stopped: ... after 0 updates`, exit 0,
    and a `translate with:` line naming a run with no checkpoint. The real command: status 2, one
    line saying why and what to change, and no run directory (the command made it)."""
    run = tmp_path / "outputs" / "run"
    overrides = [o for o in TINY_TRAIN if not o.startswith("max_steps")] + ["max_minutes=0.0001"]
    result = run_main(["seq2seq-train", *overrides, f"hydra.run.dir={run}"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: no update made (used max_minutes=0.0001)"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and "give more minutes" in result.stderr, result.stderr
    assert "translate with:" not in result.stdout + result.stderr
    assert not run.exists() and not (tmp_path / "outputs").exists()


def test_no_update_after_recipe_auto_names_the_recipe_to_give(tmp_path, slow_machine, monkeypatch):
    """Data preparation on the fake clock takes the whole budget; what the user had in the directory stays."""
    import seq2seq.train.command as run
    from seq2seq.cli.train import train
    from seq2seq.config import UserError

    prepare = run.prepare_corpus

    def slow_preparation(*args, **kwargs):
        slow_machine.now += 90.0
        return prepare(*args, **kwargs)

    monkeypatch.setattr(run, "prepare_corpus", slow_preparation)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    recipes = "recipes=[{name: only, overrides: ['model.dropout=0.2']}]"
    overrides = [*TINY_TRAIN, "max_steps=null", "max_minutes=1", "recipe=auto", recipes]
    with pytest.raises(UserError) as error:
        train(compose_config("train", overrides), tmp_path / "run")
    message = str(error.value)  # 90 s of data, 6 updates of 7 s timing the one candidate: 2.2 minutes
    assert "2.2 of max_minutes=1 went to preparing the data and timing recipe=auto's candidates" in message
    assert "recipe=only" in message, message
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["notes.txt"]


def test_the_budget_counts_from_the_commands_start(tmp_path, run_main, monkeypatch):
    """seq2seq-train hands train() the moment its main() began, before Hydra composed the config and
    torch loaded: max_minutes counts those seconds too (on a busy machine they were 15 s and more)."""
    import seq2seq.cli.train as command

    given = {}

    def train(cfg, run_dir, overrides, **kwargs):
        given.update(kwargs, called=time.monotonic())
        return {}

    monkeypatch.setattr(command, "train", train)
    before = time.monotonic()
    result = run_main(["seq2seq-train", *TINY_TRAIN, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert before <= given["started"] < given["called"]


def test_a_start_given_earlier_is_spent(tmp_path, slow_machine):
    """train(started=) counts from there: a minute spent before it leaves max_minutes=1 nothing."""
    from seq2seq.cli.train import train
    from seq2seq.config import UserError

    cfg = compose_config("train", [*TINY_TRAIN, "max_steps=null", "max_minutes=1"])
    with pytest.raises(UserError, match=r"^no update made \(used max_minutes=1\.0\)"):
        train(cfg, tmp_path / "run", started=slow_machine.now - 61.0)
    assert not (tmp_path / "run").exists()
