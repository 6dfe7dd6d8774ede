"""scripts/check_gpu.sh's dry run (DEVICE=cpu): every part's every command, tiny, on the CPU (-m slow), and
by default every part with its commands recorded and parsed, not run, so that a typo in the script or a
renamed flag is found here and not on a lent GPU, where each minute counts; and
scripts/prepare_gpu_copy.py's checks of what that machine is sent."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

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


# Every part's dry run is slow (75 s of the suite's CPU for the training parts, 45 s for tests, result and
# extra): they run with -m slow, before a GPU loan. By default
# test_each_part_gives_each_command_what_it_takes runs the script with its commands recorded, not run.
@pytest.mark.slow
@pytest.mark.parametrize("part", PARTS)
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


@pytest.mark.slow  # extra's dry run; by default test_each_part_gives_each_command_what_it_takes
def test_the_torchrun_step_compares_the_resumed_run_bit_for_bit(dry_runs):
    summary = (dry_runs("extra")[1] / "summary_extra.txt").read_text()
    assert "bitwise equal: True" in summary and "resumed: True" in summary, summary


# What stands in for `python` and `torchrun` below: each call's words go to a file of their own, in order,
# NUL-separated, and nothing runs.
RECORDER = """#!/usr/bin/env bash
n=$(ls "$RECORDED" | wc -l)
printf '%s\\0' "$(basename "$0")" "$@" >"$RECORDED/$(printf %03d "$n")"
"""


def recorded_commands(part: str, data: Path, base: Path) -> list[list[str]]:
    """check_gpu.sh PART's dry run with `python` and `torchrun` recorded, not run: each command's words.
    RUNS_DIR is base/runs for every part, as on the GPU machine, where extra reads result's run."""
    shims, recorded = base / part / "bin", base / part / "recorded"
    shims.mkdir(parents=True)
    recorded.mkdir()
    for name in ("python", "torchrun"):
        (shims / name).write_text(RECORDER)
        (shims / name).chmod(0o755)
    env = {
        **os.environ,
        "DEVICE": "cpu",
        "MINUTES": "3",
        "RUNS_DIR": str(base / "runs"),
        "RECORDED": str(recorded),
        "PATH": f"{shims}:{os.environ['PATH']}",
    }
    command = ["bash", str(ROOT / "scripts" / "check_gpu.sh"), part, str(data), str(base / part / "out")]
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert process.returncode == 0 and not process.stderr, process.stderr
    statuses = [line for line in process.stdout.splitlines() if "rc=" in line]
    assert statuses and all(" rc=0" in f" {line}" for line in statuses), process.stdout
    return [path.read_text().split("\0")[:-1] for path in sorted(recorded.iterdir())]


class Parsed(Exception):
    """Raised where a script's main has parsed its command line: the namespace, and nothing run."""

    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__()
        self.namespace = namespace


def stopping_after(parse: Callable) -> Callable:
    def parse_then_stop(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise Parsed(parse(self, *args, **kwargs))

    return parse_then_stop


def parsed_arguments(words: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, argparse.Namespace]:
    """`python scripts/X.py ...` as X's own main parses it (an argument it does not take exits, as there)."""
    assert words[0] == "python" and (ROOT / words[1]).is_file(), words
    module = load_script(Path(words[1]).stem)
    with monkeypatch.context() as patched:
        for name in ("parse_args", "parse_intermixed_args"):
            patched.setattr(argparse.ArgumentParser, name, stopping_after(getattr(argparse.ArgumentParser, name)))
        patched.setattr(sys, "argv", words[1:])
        with pytest.raises(Parsed) as parsed:
            module.main()
    return module, parsed.value.namespace


def checked_train_command(words: list[str]) -> bool:
    """seq2seq-train's own checks of a command line before Hydra runs (seq2seq/cli/train.py): unknown keys
    and groups refused; whether the composed config was validated (not for a resume, which keeps its own)."""
    from seq2seq.cli.train import GROUPS, check_composed_config, check_override_keys
    from seq2seq.config import TrainConfig

    check_override_keys(words, TrainConfig, GROUPS)
    return check_composed_config(words)


def value_of(words: list[str], key: str) -> str | None:
    return next((word.split("=", 1)[1] for word in words if word.startswith(f"{key}=")), None)


def test_each_part_gives_each_command_what_it_takes(small_multi30k, tmp_path, monkeypatch):
    """The default run's check of check_gpu.sh, whose dry runs are slow: the parts run with `python` and
    `torchrun` recorded, and each command's arguments go through that command's own parser (argparse for
    the scripts, torchrun's, seq2seq-train's checks of its overrides and config), so a flag renamed or a
    key typed wrong fails here; and the parts agree on their paths. Training's parts run bench_train.py;
    tests names test files, which this suite collects too; result trains, extra resumes and translates."""
    from torch.distributed.run import get_args_parser

    recorded = {part: recorded_commands(part, small_multi30k, tmp_path) for part in PARTS}
    for part in ("smoke", "speed", "big", "compile"):
        benches = [words for words in recorded[part] if words[1] == "scripts/bench_train.py"]
        assert benches, recorded[part]
        for words in benches:
            _, bench_args = parsed_arguments(words, monkeypatch)
            assert Path(bench_args.data_dir) == small_multi30k.resolve()
    (pytest_words,) = recorded["tests"]
    assert pytest_words[1:3] == ["-m", "pytest"]
    test_files = [word for word in pytest_words if word.startswith("tests/")]
    assert test_files and all((ROOT / name).is_file() for name in test_files), pytest_words
    result, extra = recorded["result"], recorded["extra"]
    reproduce_words, summarised = result
    reproduce, args = parsed_arguments(reproduce_words, monkeypatch)
    assert summarised[1] == "scripts/gpu_summary.py"
    assert Path(summarised[2]) == (tmp_path / "result" / "out" / "reproduce.json").resolve()
    # reproduce.py's own seq2seq-train command, recorded as it would start it
    started: list[list[str]] = []

    class Recorded:
        returncode = 0

        def __init__(self, command: list[str], **kwargs: object) -> None:
            started.append(command)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(reproduce.subprocess, "Popen", Recorded)
    run_dir = Path(args.run_dir).resolve()
    reproduce.train(args, run_dir)
    (train_command,) = started
    assert Path(train_command[0]).name == "seq2seq-train" and checked_train_command(train_command[1:])
    assert value_of(train_command, "hydra.run.dir") == str(run_dir)

    *ddp, ddp_summary, bench, bench_summary = extra
    runs = []
    for words in ddp:
        torchrun = get_args_parser().parse_args(words[1:])
        assert words[0] == "torchrun" and torchrun.module and torchrun.training_script == "seq2seq.cli.train"
        overrides = torchrun.training_script_args
        resume = value_of(overrides, "resume")
        assert checked_train_command(overrides) == (resume is None)  # a resumed run keeps its own config
        runs.append((Path(value_of(overrides, "hydra.run.dir")), int(value_of(overrides, "max_steps")), resume))
    (straight, steps, _), (resumed, first_steps, _), (again, last_steps, resume) = runs
    assert straight != resumed == again == Path(resume) and first_steps < steps == last_steps
    assert ddp_summary[1:3] == ["scripts/gpu_summary.py", "--ddp"]
    assert {Path(ddp_summary[3]) / "ddp_straight", Path(ddp_summary[3]) / "ddp_resumed"} == {straight, resumed}
    _, bench_args = parsed_arguments(bench, monkeypatch)
    assert Path(bench_args.run).resolve() == run_dir  # extra translates with result's run
    assert Path(bench_args.input).is_file() and Path(bench_args.reference).is_file()
    assert bench_summary[1:] == ["scripts/gpu_summary.py", bench_args.report]


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
