"""Every path of a run directory (seq2seq/artifacts/run_dir.py): the layout is spelled out here by
hand, so a change to it shows as a failing test, not as a silent move of a run's files."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from seq2seq.artifacts.replacing import temporary_affixes
from seq2seq.artifacts.run_dir import RUN_DIRECTORIES, RunDir
from seq2seq.config import UserError

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"


def test_the_paths_of_a_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.checkpoint("best") == tmp_path / "checkpoints" / "best.pt"
    assert run.checkpoint("averaged") == tmp_path / "checkpoints" / "averaged.pt"
    assert run.checkpoint(RunDir.step_name(1200)) == tmp_path / "checkpoints" / "step_1200.pt"
    assert (run.model, run.ctranslate2, run.tb) == (tmp_path / "model", tmp_path / "ctranslate2", tmp_path / "tb")
    assert (run.marker, run.lock) == (tmp_path / ".seq2seq-run", tmp_path / ".lock")
    assert run.relative(run.checkpoint("last")) == "checkpoints/last.pt"


@pytest.mark.parametrize(
    ("name", "step"),
    [("step_7.pt", 7), ("step_7", 7), ("step_120.pt", 120), ("last.pt", None), ("step_.pt", None),
     ("step_7x.pt", None), ("step_7.pt.bak", None), (".step_7.pt.abc.tmp", None)],
)  # fmt: skip
def test_step_of_reads_only_periodic_names(name: str, step: int | None) -> None:
    assert RunDir.step_of(Path("/run/checkpoints") / name) == step


def test_periodic_checkpoints_come_in_update_order(tmp_path: Path) -> None:
    """By the update, not by the name: step_10 after step_9 (a sort by name puts it first)."""
    run = RunDir(tmp_path)
    run.checkpoints.mkdir()
    for name in ("step_100.pt", "step_9.pt", "step_10.pt", "best.pt", "last.pt", "step_x.pt", "step_5.pt.bak"):
        (run.checkpoints / name).write_bytes(b"")
    assert [p.name for p in run.periodic_checkpoints()] == ["step_9.pt", "step_10.pt", "step_100.pt"]
    assert RunDir(tmp_path / "absent").periodic_checkpoints() == []


def test_find_checkpoint_prefers_best_then_last(tmp_path: Path) -> None:
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / "last.pt").write_bytes(b"")
    (directory / "step_10.pt").write_bytes(b"")
    assert RunDir(tmp_path).find_checkpoint() == directory / "last.pt"
    (directory / "best.pt").write_bytes(b"")
    assert RunDir(tmp_path).find_checkpoint() == directory / "best.pt"
    assert RunDir(tmp_path).find_checkpoint(prefer=("last",)) == directory / "last.pt"


def test_find_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such run directory"):
        RunDir(tmp_path / "absent").find_checkpoint()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_10.pt").write_bytes(b"")
    with pytest.raises(UserError) as info:
        RunDir(tmp_path).find_checkpoint()
    assert str(info.value) == f"{tmp_path}: has no checkpoint (looked for checkpoints/{{best,last}}.pt)"


def test_a_save_temporary_is_a_runs_file_and_removed_when_stale(tmp_path: Path) -> None:
    """The temporary a crash-safe save makes (as atomic_save names it) is what the run's file list
    counts as its own and what remove_stale_temporaries removes; nothing else there goes."""
    run = RunDir(tmp_path)
    run.checkpoints.mkdir()
    prefix, suffix = temporary_affixes(run.checkpoint("last"))
    _, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=run.checkpoints)
    Path(tmp_name).write_bytes(b"x" * 100)
    assert RUN_DIRECTORIES["checkpoints"].fullmatch(Path(tmp_name).name)
    kept = ["last.pt", "step_3.pt", "notes.tmp", ".hidden.tmp"]
    for name in kept:
        (run.checkpoints / name).write_bytes(b"y")
    assert run.remove_stale_temporaries() == 100
    assert sorted(p.name for p in run.checkpoints.iterdir()) == sorted(kept)


def test_what_a_run_writes_into_checkpoints(tmp_path: Path) -> None:
    pattern = RUN_DIRECTORIES["checkpoints"]
    for name in ("best.pt", "last.pt", "averaged.pt", "step_40.pt", ".last.pt.k2j3.tmp"):
        assert pattern.fullmatch(name), name
    for name in ("mine.pt", "step_.pt", "last.pt.bak", "notes.txt", "step_4.pt~"):
        assert not pattern.fullmatch(name), name


def test_the_run_directory_modules_import_no_torch() -> None:
    """They are read before torch would load (the CTranslate2 path of seq2seq-translate, the checks of
    seq2seq-train), so importing them must not import it."""
    code = (
        "import sys; import seq2seq.artifacts.run_dir, seq2seq.artifacts.path_kind, seq2seq.artifacts.freshness; "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def _code_strings(path: Path) -> list[str]:
    """The string literals of a module (f-strings' literal parts included), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_only_run_dir_names_the_checkpoints_directory_and_the_step_pattern() -> None:
    """ "checkpoints" as a path, and step_N parsed or formatted (a regex, a glob, an f-string's
    "step_"), in one module; help texts that describe step_N.pt files are prose, not the pattern."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "artifacts" / "run_dir.py":
            continue
        for text in _code_strings(path):
            if text == "checkpoints" or text.startswith("checkpoints/") or re.search(r"step_(\(|\*|\\d|$)", text):
                found.append(f"{path.relative_to(PACKAGE.parent)}: {text!r}")
    assert not found, "\n".join(found)
