"""precision=auto picks the precision this machine runs faster; an explicit slow choice is warned about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging

import seq2seq.precision as precision
from seq2seq import cpuinfo
from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.config import UserError
from seq2seq.precision import MatmulRates, cached_matmul_rates, choose_precision

CPU = torch.device("cpu")
AVX2 = MatmulRates(fp32=116.0, bf16=0.8, capability="AVX2")  # as measured on an AMD EPYC
AMX = MatmulRates(fp32=158.0, bf16=637.0, capability="AMX")  # as measured on a Xeon with AMX


def fake(rates: MatmulRates):
    return lambda d_model, ffn_dim: rates


def no_measurement(d_model: int, ffn_dim: int) -> MatmulRates:
    raise AssertionError("an explicit fp32 needs no measurement")


@pytest.fixture
def bf16_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU that lists bf16 instructions (AMX, AVX512-BF16), whatever this machine is."""
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: True)


@pytest.mark.usefixtures("bf16_instructions")
def test_auto_takes_bf16_where_it_is_faster_and_says_why() -> None:
    choice = choose_precision("auto", CPU, 256, 1024, fake(AMX))
    assert choice.precision == "bf16"
    assert choice.reason == "auto: bf16 matmul 637 GFLOP/s vs fp32 158 on this CPU (AMX)"
    assert choice.warning is None


@pytest.mark.usefixtures("bf16_instructions")
def test_the_decoding_precision_help_says_what_auto_decodes_in() -> None:
    """seq2seq-translate's and seq2seq-serve's help (and docs/configure-reference.md) said "auto
    (measured: bf16 where faster, else fp32)" while decoding takes fp32 wherever bf16 is faster."""
    from seq2seq.config import ServeConfig, TranslateConfig

    assert choose_precision("auto", CPU, 256, 1024, fake(AMX)).precision == "bf16"  # training's auto
    assert precision.choose_decoding_precision("auto", CPU, 256, 1024, fake(AMX)).precision == "fp32"
    reference = (Path(__file__).resolve().parents[1] / "docs" / "configure-reference.md").read_text()
    for schema in (TranslateConfig, ServeConfig):
        help = schema.__dataclass_fields__["precision"].metadata["help"]
        auto = help.split("|")[0]  # what auto means, before the other choices
        assert auto.startswith("auto (fp32") and "bf16" not in auto and "measured" not in auto, (schema, help)
    documented = [line for line in reference.splitlines() if line.startswith("| `precision` |")]
    assert len(documented) == 3  # training's, seq2seq-translate's and seq2seq-serve's
    assert "measured: bf16 where faster" in documented[0]  # training's auto is measured
    for line in documented[1:]:
        assert "bf16 where faster" not in line and "measured" not in line, line


def test_auto_takes_fp32_where_bf16_has_no_hardware_path() -> None:
    choice = choose_precision("auto", CPU, 256, 1024, fake(AVX2))
    assert choice.precision == "fp32"
    assert choice.reason == "auto: bf16 matmul 0.8 GFLOP/s vs fp32 116 on this CPU (AVX2)"


@pytest.mark.usefixtures("bf16_instructions")
def test_auto_keeps_fp32_when_bf16_wins_only_narrowly() -> None:
    """autocast's casts eat a small matmul gain: bf16 must be BF16_MIN_SPEEDUP x faster to be chosen."""
    just_below = MatmulRates(fp32=100.0, bf16=100.0 * precision.BF16_MIN_SPEEDUP - 1, capability="AMX")
    assert choose_precision("auto", CPU, 256, 1024, fake(just_below)).precision == "fp32"
    just_above = MatmulRates(fp32=100.0, bf16=100.0 * precision.BF16_MIN_SPEEDUP + 1, capability="AMX")
    assert choose_precision("auto", CPU, 256, 1024, fake(just_above)).precision == "bf16"


def test_auto_keeps_fp32_on_a_cpu_without_bf16_instructions_whatever_the_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A busy machine once timed a tiny fp32 matmul at 0.05 GFLOP/s against emulated bf16's 0.27 (both
    2-thread calls waited for a core): auto must not take emulated bf16 on such noise."""
    noisy = MatmulRates(fp32=0.052, bf16=0.269, capability="AVX2")
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: False)
    assert choose_precision("auto", CPU, 64, 256, fake(noisy)).precision == "fp32"
    assert choose_precision("auto", CPU, 64, 256, fake(MatmulRates(1.0, 3.0, "AVX512"))).precision == "fp32"
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: True)
    assert choose_precision("auto", CPU, 64, 256, fake(MatmulRates(1.0, 3.0, "AVX512-BF16"))).precision == "bf16"


def test_a_measurement_keeps_the_fastest_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls slowed by a busy machine do not count: the rate is that of the fastest call."""
    # start, then (before, after) of calls of 1.0, 0.5 and 2.0 s, a check (3.5 < 4: go on), a 1.0 s call, a check
    ticks = iter([0.0, 0.0, 1.0, 1.0, 1.5, 1.5, 3.5, 3.5, 3.5, 4.5, 4.5])
    monkeypatch.setattr(precision.time, "perf_counter", lambda: next(ticks))
    monkeypatch.setattr(precision, "TIMED_SECONDS", 4.0)
    monkeypatch.setattr(precision, "MIN_CALLS", 3)
    rate = precision._gflops(8, 16, torch.float32)
    assert rate == pytest.approx(2.0 * precision.ROWS * 8 * 16 / 0.5 / 1e9)


def test_explicit_bf16_runs_as_asked_but_warns_when_much_slower() -> None:
    slow = choose_precision("bf16", CPU, 256, 1024, fake(AVX2))
    assert slow.precision == "bf16"
    assert slow.warning is not None
    assert "145x slower than fp32" in slow.warning and "precision=auto or precision=fp32" in slow.warning
    assert "0.8 GFLOP/s vs fp32 116" in slow.warning
    assert choose_precision("bf16", CPU, 256, 1024, fake(AMX)).warning is None


def test_explicit_fp32_measures_nothing_and_fp16_on_a_cpu_is_refused() -> None:
    assert choose_precision("fp32", CPU, 256, 1024, no_measurement).precision == "fp32"
    with pytest.raises(UserError, match=r"^config error: precision='fp16' needs a GPU; on a CPU use precision=auto"):
        choose_precision("fp16", CPU, 256, 1024, no_measurement)
    with pytest.raises(UserError, match="precision='fp8'"):
        choose_precision("fp8", CPU, 256, 1024, no_measurement)


def test_the_measurement_is_cached_per_machine_and_survives_a_corrupt_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path))
    calls = []

    def measure(d_model: int, ffn_dim: int) -> MatmulRates:
        calls.append((d_model, ffn_dim))
        return AVX2

    monkeypatch.setattr(precision, "measure_matmul_rates", measure)
    assert cached_matmul_rates(256, 1024) == AVX2
    assert cached_matmul_rates(256, 1024) == AVX2
    assert calls == [(256, 1024)]  # the second came from the file
    assert cached_matmul_rates(512, 2048) == AVX2
    assert calls == [(256, 1024), (512, 2048)]  # another shape is another measurement
    saved = json.loads((tmp_path / "precision.json").read_text())
    assert len(saved) == 2 and all(torch.__version__ in key and "threads" in key for key in saved)
    (tmp_path / "precision.json").write_text("{not json")
    assert cached_matmul_rates(256, 1024) == AVX2
    assert len(calls) == 3


def test_a_real_measurement_times_both_precisions() -> None:
    rates = precision.measure_matmul_rates(64, 128)
    assert rates.fp32 > 0 and rates.bf16 > 0
    assert rates.capability == precision.cpu_capability()
    assert precision.cpu_capability() in ("AMX", "AVX512-BF16", torch.backends.cpu.get_cpu_capability())


@pytest.mark.usefixtures("bf16_instructions")
def test_training_logs_the_choice_records_it_and_a_resume_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """auto chose bf16 for the run (fake AMX figures); resumed where bf16 measures slower, it stays bf16,
    since the checkpoint's config says what the run computed in."""
    overrides = [o for o in TINY_TRAIN if not o.startswith("precision=")] + ["max_steps=4"]
    monkeypatch.setattr(precision, "cached_matmul_rates", fake(AMX))
    summary, lines = train_logging(compose_config("train", overrides), tmp_path / "run")
    assert "precision: bf16 (auto: bf16 matmul 637 GFLOP/s vs fp32 158 on this CPU (AMX))" in lines
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["precision"] == "bf16"

    monkeypatch.setattr(precision, "cached_matmul_rates", fake(AVX2))
    resume = [f"resume={tmp_path / 'run'}", "max_steps=6"]
    from seq2seq.cli.train import train

    train(compose_config("train", [*overrides, *resume]), tmp_path / "run", overrides=resume)
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["precision"] == "bf16"


def test_training_with_a_slow_explicit_bf16_warns_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    overrides = [o for o in TINY_TRAIN if not o.startswith("precision=")] + ["max_steps=2", "precision=bf16"]
    monkeypatch.setattr(precision, "cached_matmul_rates", fake(AVX2))
    _, lines = train_logging(compose_config("train", overrides), tmp_path / "run")
    warnings = [line for line in lines if "slower than fp32" in line]
    assert len(warnings) == 1 and "precision=auto or precision=fp32" in warnings[0]


def test_the_trainer_is_given_its_precision_and_leaves_the_config_alone(tmp_path, monkeypatch):
    """precision=auto is resolved outside the Trainer's config (#32): the Trainer computes in the
    choice it is given, the config keeps what the user wrote, and the checkpoint records the choice."""
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.trainer import Trainer

    cfg = compose_config("train", [*TINY_TRAIN, "precision=auto"])
    given = precision.PrecisionChoice("fp32", "given by the test")
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")),
        tmp_path,
        prepare_data(cfg.data),
        torch.device("cpu"),
        DistContext(),
        precision=given,
    )
    assert cfg.precision == "auto" and trainer.precision == "fp32" and trainer.precision_choice is given
    assert trainer.training_state().config["precision"] == "fp32"
