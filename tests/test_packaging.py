"""The package as pip builds it: quiet, and with every config file Hydra composes from."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_builds_without_setuptools_warnings_and_holds_every_config(tmp_path: Path) -> None:
    """Regression: the config-group folders were importable but absent from `packages`, so every
    install printed four setuptools warnings (and a future setuptools would leave them out)."""
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info next to the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "tests"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "absent from the `packages` configuration" not in output
    assert "BuildBackendWarning" not in output
    (wheel,) = tmp_path.glob("seq2seq-*.whl")
    packed = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".yaml")}
    expected = {"seq2seq/" + str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")}
    assert packed == expected and len(packed) >= 19
    assert "seq2seq/serve/page.html" in zipfile.ZipFile(wheel).namelist()  # seq2seq-serve's page
