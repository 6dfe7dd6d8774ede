"""How CPU threads wait (seq2seq/cpu_sharing.py): short spinning unless the user chose, set before
OpenMP loads, and said in the log with the load the machine had at start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seq2seq import cpu_sharing


def test_short_spinning_is_the_default() -> None:
    environ: dict[str, str] = {}
    cpu_sharing.set_thread_waiting(environ)
    assert environ == {"GOMP_SPINCOUNT": "1000"}


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_the_users_choice_is_kept(user: dict[str, str]) -> None:
    environ = dict(user)
    cpu_sharing.set_thread_waiting(environ)
    assert environ == user
    line = cpu_sharing.describe(environ, 0.1, 2)
    assert "as the environment says" in line and next(iter(user)) in line


def test_importing_the_package_sets_it_before_torch_loads_openmp() -> None:
    """In a fresh process: seq2seq first, then torch; libgomp reads the variable when torch loads it."""
    env = {k: v for k, v in os.environ.items() if k not in cpu_sharing.USER_KEYS}
    code = "import seq2seq, os, sys; assert 'torch' not in sys.modules; print(os.environ['GOMP_SPINCOUNT'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1000"


def test_importing_the_package_loads_ctranslate2_before_torch_runs() -> None:
    """ctranslate2's own libgomp, loaded after PyTorch's OpenMP threads had run, decoded ~10x slower
    (docs/performance.md): importing seq2seq loads it first, without loading torch."""
    pytest.importorskip("ctranslate2")
    code = "import seq2seq, sys; print('ctranslate2' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_the_log_says_whether_the_machine_looked_shared() -> None:
    environ = {"GOMP_SPINCOUNT": "1000"}
    idle = cpu_sharing.describe(environ, 0.2, 2)
    assert "load average 0.20 at start (idle)" in idle and "1,000 spins" in idle
    shared = cpu_sharing.describe(environ, 2.0, 2)
    assert "shared with other work" in shared and "roughly 50% of the idle speed" in shared  # 2 / (2 + 2)
    assert cpu_sharing.describe(environ, None, 2).startswith("cpu: 2 cores;")


def test_training_logs_it(tmp_path, monkeypatch) -> None:
    from conftest import TINY_TRAIN, compose_config, train_logging

    monkeypatch.setattr(cpu_sharing, "load_at_start", 3.0)
    # device=cpu: the line is about the CPU's cores, and a run on a GPU does not print it
    _, lines = train_logging(compose_config("train", [*TINY_TRAIN, "max_steps=2", "device=cpu"]), tmp_path / "run")
    assert any(line.startswith("cpu: ") and "load average 3.00 at start: shared" in line for line in lines), lines
