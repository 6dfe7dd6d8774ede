"""Prepares the copy a bare GPU machine needs to run scripts/check_gpu.sh, and checks it here, on the CPU.

    python scripts/prepare_gpu_copy.py [--data-dir ../shared/data/multi30k] [--out .gpu]

A lent GPU machine has its own Python (3.12) with PyTorch and many packages, and no registry: what it
lacks of this project's dependencies travels as wheels, with the Multi30k files, in one folder that git
ignores (`.gpu/`, carried beside the working tree). This writes that folder and checks, before any GPU
time is spent:
  - every wheel is for that Python and Linux on x86-64, and there is one version of each package;
  - every requirement of every wheel is met by a wheel carried or by a package the machine has
    (scripts/gpu_machine_packages.txt), so the install there cannot stop on a missing one;
  - the data files are all there, and the folder plus the working tree fit the copy limit.
Prints one JSON object (the wheels, their sizes, the total) and exits 1 when a check fails.
On the GPU machine, scripts/gpu_env.sh installs the folder and the project.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
# The GPU machine's Python, and the platforms its pip accepts (the device tool's notes).
PYTHON_VERSION = "3.12"
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
# What this project needs there and the machine lacks, pinned to the versions this checkout's venv
# runs (so both machines run the same code): training and reproduce.py (hydra, datasets, pycountry,
# sacremoses), and the CTranslate2 engine for the translation bench.
CARRIED = [
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",  # hydra's parser; an sdist only on PyPI, built into a wheel here
    "datasets",
    "dill",
    "multiprocess",
    "pycountry",
    "sacremoses",
    "ctranslate2",
]
COPY_LIMIT_MB = 64  # the working tree and the carried paths together, per call
DATA_FILES = [f"{split}.{lang}.gz" for split in ("train", "val", "test_2016_flickr") for lang in ("en", "de")]


def download(names: list[str], wheels: Path) -> None:
    """Each package at the version installed here, as a wheel for the GPU machine's Python."""
    platforms = [arg for p in [*PLATFORMS, "any"] for arg in ("--platform", p)]
    for name in names:
        pinned = f"{name}=={metadata.version(name)}"
        binary = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
        binary += ["--python-version", PYTHON_VERSION, "--implementation", "cp", *platforms, pinned]
        if subprocess.run(binary, capture_output=True).returncode != 0:  # an sdist only: a pure-Python wheel
            build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), pinned]
            subprocess.run(build, check=True, capture_output=True)


def requirements(wheel: Path) -> list[Requirement]:
    """The requirements a wheel declares for the GPU machine's Python, without optional extras."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        fields = Parser().parsestr(archive.read(name).decode())
    environment = {"python_version": PYTHON_VERSION, "sys_platform": "linux", "platform_machine": "x86_64"}
    needed = []
    for line in fields.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or marker.evaluate({**environment, "extra": ""}):
            needed.append(requirement)
    return needed


def check(wheels: Path, data: Path, machine_packages: set[str]) -> list[str]:
    """What would stop the install or the checks on the GPU machine, one line each."""
    problems = []
    names: dict[str, list[str]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        name, _, _, tags = parse_wheel_filename(wheel.name)
        names.setdefault(name, []).append(wheel.name)
        if not any(t.interpreter in ("py3", "cp312", "py312") and _runs_there(t.platform) for t in tags):
            problems.append(f"{wheel.name}: not for CPython {PYTHON_VERSION} on Linux x86-64")
    problems += [
        f"{name}: {len(files)} versions ({', '.join(files)})" for name, files in names.items() if len(files) > 1
    ]
    have = set(names) | machine_packages
    for wheel in sorted(wheels.glob("*.whl")):
        for requirement in requirements(wheel):
            if canonicalize_name(requirement.name) not in have:
                problems.append(f"{wheel.name}: needs {requirement}, which is neither carried nor on the machine")
    problems += [f"{data / name}: missing" for name in DATA_FILES if not (data / name).is_file()]
    return problems


def _runs_there(platform: str) -> bool:
    return platform == "any" or (platform.startswith("manylinux") and platform.endswith("x86_64"))


def tree_megabytes() -> float:
    """The working tree that travels with every call: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    paths = [ROOT / p for p in listed.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def machine_package_names() -> set[str]:
    text = (ROOT / "scripts" / "gpu_machine_packages.txt").read_text()
    return {canonicalize_name(line) for line in text.split() if line and not line.startswith("#")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--out", default=str(ROOT / ".gpu"), help="the folder to carry (git ignores .gpu/)")
    parser.add_argument("--packages", default=",".join(CARRIED), help="comma-separated; default: what check_gpu needs")
    args = parser.parse_args()
    out = Path(args.out)
    wheels, data = out / "whl", out / "data" / "multi30k"
    if (out / "MANIFEST.json").is_file():  # a copy this script made before: replaced whole
        shutil.rmtree(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"error: {out}: exists and was not made by this script; give --out a new folder")
    wheels.mkdir(parents=True)
    data.mkdir(parents=True)
    download([n for n in args.packages.split(",") if n], wheels)
    for name in DATA_FILES:
        if (Path(args.data_dir) / name).is_file():
            shutil.copy2(Path(args.data_dir) / name, data / name)
    problems = check(wheels, data, machine_package_names())
    carried_mb = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 2**20
    total_mb = carried_mb + tree_megabytes()
    if total_mb > COPY_LIMIT_MB:
        problems.append(f"{out} ({carried_mb:.1f} MB) and the working tree: {total_mb:.1f} MB, over {COPY_LIMIT_MB}")
    manifest = {
        "wheels": {p.name: round(p.stat().st_size / 2**20, 2) for p in sorted(wheels.glob("*.whl"))},
        "data": sorted(p.name for p in data.iterdir()),
        "carried_mb": round(carried_mb, 1),
        "with_working_tree_mb": round(total_mb, 1),
        "problems": problems,
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
    print(json.dumps(manifest))
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
