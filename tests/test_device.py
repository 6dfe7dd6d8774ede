"""Device choice and deterministic mode (`seq2seq.device`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN

from seq2seq.device import CUBLAS_DETERMINISTIC, use_deterministic_algorithms


@pytest.fixture()
def restore_determinism():
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


def test_deterministic_on_cuda_sets_the_cublas_workspace(monkeypatch, restore_determinism):
    """Regression: deterministic=true on CUDA raised inside cuBLAS unless CUBLAS_WORKSPACE_CONFIG was set."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    use_deterministic_algorithms(torch.device("cuda", 1))  # sets only the environment: no GPU needed
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_DETERMINISTIC == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()


def test_deterministic_keeps_the_users_cublas_setting_and_leaves_cpu_runs_alone(monkeypatch, restore_determinism):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    use_deterministic_algorithms(torch.device("cuda"))
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    use_deterministic_algorithms(torch.device("cpu"))
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_deterministic_training_on_cuda_runs_without_cublas_config(tmp_path: Path):
    """A fresh process (cuBLAS reads the variable once) with CUBLAS_WORKSPACE_CONFIG unset."""
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    env["SEQ2SEQ_CACHE"] = str(tmp_path / "cache")
    command = [sys.executable, "-m", "seq2seq.cli.train", *TINY_TRAIN, "max_steps=2", "valid_every=2"]
    command += ["device=cuda", "deterministic=true", f"hydra.run.dir={tmp_path / 'run'}"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
