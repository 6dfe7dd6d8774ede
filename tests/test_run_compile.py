"""compile=auto's rule, on timings given to it (nothing is timed here): compiled where, its compile time
paid, it makes more updates in the budget (or its updates sooner) than eager, by MIN_GAIN."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_TRAIN, compose_config

from seq2seq.config import ConfigValueError, compiles, validate_train
from seq2seq.measurement_cache import cache_file
from seq2seq.precision import PrecisionChoice
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.plan import with_compile
from seq2seq.train.run_compile import CompileTimings, choose_compile, compile_pays

# Compiled 0.6 s an update against eager's 1.0, after 300 s of compiling.
FASTER = CompileTimings(eager_seconds=1.0, compiled_seconds=0.6, compile_seconds=300.0)


@pytest.mark.parametrize(
    ("minutes", "steps", "expected"),
    [
        # 60 minutes: 3060 s of updates; eager 3,060 updates, compiled (3060 - 300) / 0.6 = 4,600
        (60, None, True),
        # 5 minutes: 255 s, less than the compile time: compiled makes none
        (5, None, False),
        # 10 minutes: 510 s; eager 510, compiled 350: the compile time is not won back
        (10, None, False),
        # steps only: 2,000 updates take 2,000 s eager, 300 + 1,200 compiled
        (None, 2000, True),
        # 500 updates: 500 s eager against 600 compiled
        (None, 500, False),
        # both: 60 minutes would give both more than 100 updates: the sooner done (100 s eager, 360 compiled)
        (60, 100, False),
        # both, and only eager makes the cap: compiled 4,600 capped at 4,000 against eager's 3,060
        (60, 4000, True),
    ],
)
def test_compiled_where_it_makes_more_updates_after_its_compile_time(minutes, steps, expected) -> None:
    assert compile_pays(FASTER, minutes, steps).compile is expected


def test_a_close_call_stays_eager() -> None:
    """Within MIN_GAIN (5%) of eager is noise on a shared machine, not a reason to compile."""
    close = CompileTimings(eager_seconds=1.0, compiled_seconds=0.97, compile_seconds=0.0)
    assert not compile_pays(close, None, None).compile
    assert not compile_pays(close, 60, None).compile
    clear = CompileTimings(eager_seconds=1.0, compiled_seconds=0.9, compile_seconds=0.0)
    assert compile_pays(clear, None, None).compile
    assert compile_pays(clear, 60, None).compile


def test_the_reason_names_the_timings_it_decided_on() -> None:
    reason = compile_pays(FASTER, 60, None).reason
    assert "0.6 s/update compiled vs 1 eager" in reason and "300 s to compile" in reason
    assert "4,600 updates compiled against ~3,060 eager" in reason


def test_auto_becomes_the_measured_choice_once_per_machine(tmp_path, monkeypatch) -> None:
    """The config the Trainer gets says true or false; a second run on the machine reads the cached
    timings instead of measuring."""
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))  # no other test's compile.json
    calls = []

    def measure() -> CompileTimings:
        calls.append(1)
        return FASTER

    cpu, dist = torch.device("cpu"), DistContext()

    def choose(cfg) -> bool:
        eager, compiled = (TrainingParts.of(cfg, cpu, compiled=c) for c in (False, True))
        return choose_compile(
            eager, compiled, None, cpu, dist, PrecisionChoice("fp32", "as asked"), lambda: 0.0, measure=measure
        )

    cfg = compose_config("train", [*TINY_TRAIN, "compile=auto", "max_steps=2000"])
    assert choose(cfg) is True
    assert cache_file("compile.json").is_file()
    assert choose(cfg) is True and calls == [1]
    chosen = with_compile(cfg, True)
    assert chosen.compile == "true" and compiles(chosen) and cfg.compile == "auto"
    assert with_compile(cfg, False).compile == "false"
    shorter = compose_config("train", [*TINY_TRAIN, "compile=auto", "max_steps=500"])
    assert choose(shorter) is False and calls == [1]


def test_compile_takes_true_false_or_auto() -> None:
    assert compiles(compose_config("train", ["compile=true"]))
    assert not compiles(compose_config("train", ["compile=false"]))
    cfg = compose_config("train", ["compile=sometimes"])
    with pytest.raises(ConfigValueError, match="compile='sometimes': must be one of true, false, auto"):
        validate_train(cfg)
