"""scripts/check_gpu.sh's dry run (DEVICE=cpu): every part's every command, tiny, on the CPU, so that a typo
in the script or a renamed flag is found here and not on a lent GPU, where each minute counts; and
scripts/prepare_gpu_copy.py's checks of what that machine is sent."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import MULTI30K, MULTI30K_MISSING
from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
prepare_gpu_copy = load_script("prepare_gpu_copy")

PARTS = ["smoke", "speed", "big", "compile", "tests", "result", "extra"]


@pytest.fixture(scope="module")
def small_multi30k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 100 sentence pairs of each Multi30k en-de file: enough for every command to run."""
    if MULTI30K is None:
        pytest.skip(MULTI30K_MISSING)
    data = tmp_path_factory.mktemp("multi30k")
    for name in prepare_gpu_copy.DATA_FILES:
        with gzip.open(MULTI30K / name, "rt", encoding="utf-8") as source:
            lines = [line for _, line in zip(range(100), source, strict=False)]
        with gzip.open(data / name, "wt", encoding="utf-8") as target:
            target.writelines(lines)
    return data


class DryRuns:
    """Runs check_gpu.sh's parts on the CPU as tests ask for them, each once, into its own folder.
    `result` and then `extra` (which translates with result's run) start at once on a thread of their
    own: the parts are mostly process start-ups, so on 2 cores two lanes take about half the time, and
    only those two share a folder of runs."""

    BACKGROUND = ("result", "extra")

    def __init__(self, data: Path, base: Path, background: tuple[str, ...] = BACKGROUND) -> None:
        self.data, self.base = data, base
        self.done: dict[str, tuple[int, Path]] = {}
        self.env = {
            **os.environ,
            "DEVICE": "cpu",
            # The dry run's training stops at max_steps (check_gpu.sh): the minutes only have to be enough.
            "MINUTES": "3",
            "RUNS_DIR": str(base / "runs"),
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `python` is this venv's
        }
        self.background = threading.Thread(target=lambda: [self._run(part) for part in background])
        self.background.start()

    def __call__(self, part: str) -> tuple[int, Path]:
        if part in self.BACKGROUND:
            self.background.join()
            if part not in self.done:  # not foreseen by the fixture: run here, in order
                for needed in self.BACKGROUND[: self.BACKGROUND.index(part) + 1]:
                    if needed not in self.done:
                        self._run(needed)
        elif part not in self.done:
            self._run(part)
        return self.done[part]

    def _run(self, part: str) -> None:
        out = self.base / part
        command = ["bash", str(ROOT / "scripts" / "check_gpu.sh"), part, str(self.data), str(out)]
        process = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=900)
        self.done[part] = (process.returncode, out)


@pytest.fixture(scope="module")
def dry_runs(
    small_multi30k: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[DryRuns]:
    # The background lane runs what the selected tests will ask for, no more (`-k smoke` runs no result).
    selected = [item for item in request.session.items if item.fspath == request.node.fspath]
    asked = {item.callspec.params.get("part") for item in selected if hasattr(item, "callspec")}
    if any("torchrun" in item.name for item in selected):  # it reads extra's summary
        asked.add("extra")
    background = DryRuns.BACKGROUND[
        : max((DryRuns.BACKGROUND.index(p) + 1 for p in asked & {*DryRuns.BACKGROUND}), default=0)
    ]
    runs = DryRuns(small_multi30k, tmp_path_factory.mktemp("check_gpu"), background)
    yield runs
    runs.background.join()  # never left running past the module, whichever tests were selected


def failed_rows(report: Path) -> list[str]:
    """The rows of a bench's JSON that failed. On the CPU, PyTorch in fp16 is refused, as it should be."""
    data = json.loads(report.read_text())
    rows = data.get("runs", data.get("rows", [])) if isinstance(data, dict) else []
    return [row["error"] for row in rows if "error" in row and row.get("precision") != "fp16"]


# The training parts' dry runs (75 s of the suite's CPU) run with -m slow, before a GPU loan; by default
# the tests, result and extra parts run the same script and its shared steps.
SLOW_PARTS = ("smoke", "speed", "big", "compile")


@pytest.mark.parametrize("part", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PARTS else p for p in PARTS])
def test_every_step_of_every_part_runs_on_the_cpu(dry_runs, part):
    returncode, out = dry_runs(part)
    assert returncode == 0
    summary = (out / f"summary_{part}.txt").read_text()
    statuses = [line for line in summary.splitlines() if "rc=" in line]
    assert statuses, summary
    assert all(" rc=0" in f" {line}" for line in statuses), summary
    reports = list(out.glob("*.json"))
    assert reports or part == "tests", summary
    for report in reports:  # each step's own JSON, written as it went, with no row that failed
        assert not failed_rows(report), (report, failed_rows(report))


def test_the_torchrun_step_compares_the_resumed_run_bit_for_bit(dry_runs):
    summary = (dry_runs("extra")[1] / "summary_extra.txt").read_text()
    assert "bitwise equal: True" in summary and "resumed: True" in summary, summary


def test_gpu_env_installs_the_carried_wheels_and_the_checkout(tmp_path):
    script = f"cd {ROOT} && DRY_RUN=1 source scripts/gpu_env.sh && echo PYTHONPATH=$PYTHONPATH"
    printed = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert "--no-index" in printed and "--target /tmp/site .gpu/whl/" in printed and " -e ." in printed
    assert "PYTHONPATH=/tmp/site" in printed


def wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> Path:
    path = folder / f"{name}-{version}-{tag}.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def test_the_copy_check_finds_what_would_stop_the_install_there(tmp_path):
    wheels, data = tmp_path / "whl", tmp_path / "data"
    wheels.mkdir()
    data.mkdir()
    for name in prepare_gpu_copy.DATA_FILES[1:]:
        (data / name).write_bytes(b"")
    wheel(wheels, "carried", "1.0", ["numpy>=1", "absent-package", "only_on_windows; sys_platform == 'win32'"])
    wheel(wheels, "carried", "2.0", [])
    wheel(wheels, "needs_extra", "1.0", ["another; extra == 'docs'"])
    wheel(wheels, "native", "1.0", [], tag="cp311-cp311-manylinux_2_17_x86_64")
    problems = prepare_gpu_copy.check(wheels, data, {"numpy"})
    assert sorted(problems) == sorted(
        [
            "carried: 2 versions (carried-1.0-py3-none-any.whl, carried-2.0-py3-none-any.whl)",
            "carried-1.0-py3-none-any.whl: needs absent-package, which is neither carried nor on the machine",
            "native-1.0-cp311-cp311-manylinux_2_17_x86_64.whl: not for CPython 3.12 on Linux x86-64",
            f"{data / prepare_gpu_copy.DATA_FILES[0]}: missing",
        ]
    )


def test_the_machine_list_holds_what_the_project_leaves_uncarried():
    have = prepare_gpu_copy.machine_package_names()
    assert {"torch", "numpy", "pyarrow", "tokenizers", "sacrebleu", "tensorboard", "sentencepiece"} <= have
    assert not {"hydra-core", "datasets", "ctranslate2"} & have  # carried: the check above would pass vacuously
