"""`seq2seq-average` (seq2seq/average.py): the mean of the weights, and what it says it averaged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2seq.average import main
from seq2seq.checkpoint import atomic_save, load_checkpoint
from seq2seq.config import UserError

BIN = Path(sys.executable).parent


def save(run_dir: Path, name: str, step: int, value: float) -> None:
    payload = {
        "format": 1,
        "model": {"w": torch.full((2, 3), value), "b": torch.tensor([value, -value])},
        "config": {"model": {"d_model": 8}},
        "vocab": {"src_size": 10, "tgt_size": 10, "pad_id": 0},
        "step": step,
        "metrics": {},
        "optimizer": {"state": torch.ones(1)},
    }
    atomic_save(payload, run_dir / "checkpoints" / f"{name}.pt")


def test_averages_the_newest_periodic_checkpoints(tmp_path, capsys):
    for step, value in [(100, 1.0), (200, 2.0), (300, 4.0), (400, 9.0)]:
        save(tmp_path, f"step_{step}", step, value)
    save(tmp_path, "last", 400, 9.0)
    output = main([str(tmp_path), "--last", "3"])
    averaged = load_checkpoint(output)
    assert torch.equal(averaged["model"]["w"], torch.full((2, 3), 5.0))  # (2 + 4 + 9) / 3
    assert torch.equal(averaged["model"]["b"], torch.tensor([5.0, -5.0]))
    assert averaged["step"] == 400 and "optimizer" not in averaged
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == [200, 300, 400]
    assert err.splitlines() == [
        f"averaged 3 checkpoints (step_200.pt, step_300.pt, step_400.pt; updates 200, 300, 400) into {output}"
    ]


def test_fewer_periodic_checkpoints_than_asked_is_refused(tmp_path):
    # It used to "average" step_200.pt alone, without a word.
    save(tmp_path, "step_200", 200, 1.0)
    with pytest.raises(UserError) as info:
        main([str(tmp_path), "--last", "5"])
    assert str(info.value) == (
        f"{tmp_path}: --last 5 asks for 5 periodic checkpoints but the run has 1 (step_200.pt); "
        "give --last 1 to average those"
    )
    assert not (tmp_path / "checkpoints" / "averaged.pt").exists()


def test_a_newer_last_checkpoint_is_pointed_out(tmp_path, capsys):
    save(tmp_path, "step_200", 200, 1.0)
    save(tmp_path, "last", 274, 3.0)
    main([str(tmp_path), "--last", "1"])
    warning = capsys.readouterr().err.splitlines()[-1]
    assert warning == (
        f"warning: {tmp_path / 'checkpoints' / 'last.pt'} (update 274) is newer than every checkpoint averaged "
        "and is not in the average"
    )


def test_it_is_a_console_command_with_one_line_errors(tmp_path):
    result = subprocess.run([str(BIN / "seq2seq-average"), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {tmp_path}: no checkpoints/step_*.pt to average"]
