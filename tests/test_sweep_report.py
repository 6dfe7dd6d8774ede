"""scripts/sweep_report.py on a real two-run Hydra sweep of the built-in task."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_report.py"
VALIDATION = re.compile(r"validation at update (\d+): loss ([\d.]+) .* BLEU ([\d.]+)")


@pytest.mark.slow  # trains a sweep (14 s); the tests below read the report off made-up sweeps
def test_sweep_report_reads_every_run_of_a_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    subprocess.run(
        ["seq2seq-train", "-m", "max_steps=4", "valid_every=2", "model=tiny", "data.task_train_size=500",
         "data.task_valid_size=50", "attention_images=false", "model.dropout=0.0,0.2", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, check=True, capture_output=True,
    )  # fmt: skip
    plot = tmp_path / "curves.png"
    printed = subprocess.run(
        [sys.executable, str(SCRIPT), str(sweep), "--plot", str(plot)], check=True, capture_output=True, text=True
    ).stdout
    rows = json.loads(printed)
    assert [row["overrides"] for row in rows] == [["model.dropout=0.0"], ["model.dropout=0.2"]]
    for row in rows:  # the curves are the ones each run's own log printed (as rounded there)
        logged = VALIDATION.findall((Path(row["run"]) / "train.log").read_text())
        assert [s for s, _ in row["bleu"]] == [s for s, _ in row["loss"]] == [int(s) for s, _, _ in logged] == [2, 4]
        assert [b for _, b in row["bleu"]] == pytest.approx([float(b) for _, _, b in logged], abs=0.006)
        assert [v for _, v in row["loss"]] == pytest.approx([float(v) for _, v, _ in logged], abs=0.0006)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_runs_come_in_hydra_job_order(tmp_path: Path) -> None:
    for job in ("0", "2", "10"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text("[]\n")
    assert [run.name for run in load_script("sweep_report").run_dirs([tmp_path])] == ["0", "2", "10"]


def test_sweep_report_names_a_directory_without_runs(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0
    assert f"{tmp_path}: no run directory" in done.stderr


def test_sweep_report_keeps_every_validation_of_a_long_run(tmp_path: Path) -> None:
    """TensorBoard's reader keeps a random sample of 10,000 points per tag unless told otherwise."""
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("[]\n")
    with SummaryWriter(str(run / "tb")) as writer:
        for update in range(1, 10_101):
            writer.add_scalar("valid/bleu", update / 1000, update)
    (row,) = load_script("sweep_report").report([run])
    assert [step for step, _ in row["bleu"]] == list(range(1, 10_101))
