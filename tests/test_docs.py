"""The documentation (README.md and docs/) says what the code does: the key reference is generated
from the schema, every documented command line is one the commands accept, the examples run, and the
README stays the short front door that CI reads its commands from."""

from __future__ import annotations

import dataclasses
import re
import shlex
import string
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_script
from test_export import random_checkpoint

from seq2seq.cli.average import key_values
from seq2seq.cli.common import check_override_keys, parse_key_values
from seq2seq.cli.export import main as export_main
from seq2seq.cli.translate import wants_hydra
from seq2seq.config import AverageConfig, DataConfig, ServeConfig, TrainConfig, TranslateConfig
from seq2seq.inference.export import ExportConfig
from seq2seq.train.run import GROUPS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
BIN = Path(sys.executable).parent


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


# ---- the key reference ---------------------------------------------------------------------------


def test_the_key_reference_is_what_the_schema_generates() -> None:
    script = load_script("gen_config_docs")
    committed = (DOCS / "configure-reference.md").read_text()
    assert committed == script.page(), "docs/configure-reference.md is stale: run python scripts/gen_config_docs.py"


def _leaves(schema: type, prefix: str = "") -> list[tuple[str, object]]:
    leaves = []
    for f in dataclasses.fields(schema):
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(value):
            leaves += _leaves(type(value), f"{prefix}{f.name}.")
        else:
            leaves.append((prefix + f.name, value))
    return leaves


@pytest.mark.parametrize("schema", [TrainConfig, TranslateConfig, ExportConfig, AverageConfig])
def test_the_key_reference_has_every_key_with_its_default(schema: type) -> None:
    text = (DOCS / "configure-reference.md").read_text()
    for key, default in _leaves(schema):
        shown = "null" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        assert f"| `{key}` | `{shown}` | " in text, key


# ---- command lines and examples ------------------------------------------------------------------


def command_lines(text: str) -> list[list[str]]:
    """The argv of every seq2seq command in the page's bash blocks (continuation lines joined; the
    shell's redirections and pipes cut off; lines with `...` or `[optional]` placeholders left out)."""
    found = []
    for block in blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("|"):
                words = shlex.split(part, comments=True)
                for cut in ("<", ">", "&&"):
                    words = words[: words.index(cut)] if cut in words else words
                starts = [i for i, w in enumerate(words) if w.startswith("seq2seq-") or w == "seq2seq.cli.train"]
                if starts and "..." not in part and "[" not in part:
                    found.append(words[starts[0] :])
    return found


def accept(argv: list[str]) -> None:
    """What each command does with its arguments before any work: keys, groups and value types."""
    command, arguments = argv[0], [a for a in argv[1:] if a != "--help"]
    if command in ("seq2seq-train", "seq2seq.cli.train"):
        check_override_keys(arguments, TrainConfig, GROUPS)
    elif command == "seq2seq-translate":
        if wants_hydra(arguments):
            check_override_keys(arguments, TranslateConfig)
        else:
            parse_key_values(arguments, TranslateConfig)
    elif command == "seq2seq-export":
        parse_key_values(arguments, ExportConfig)
    elif command == "seq2seq-average":
        parse_key_values(key_values(arguments), AverageConfig)
    elif command == "seq2seq-serve":
        check_override_keys(arguments, ServeConfig)
    else:
        raise AssertionError(f"unknown command {command}")


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_documented_command_line_is_accepted(page: Path) -> None:
    for argv in command_lines(page.read_text()):
        accept(argv)


def test_the_command_lines_are_found() -> None:
    everything = "\n".join(p.read_text() for p in [README, *PAGES])
    commands = {argv[0] for argv in command_lines(everything)}
    assert commands == {
        "seq2seq-train", "seq2seq.cli.train", "seq2seq-translate", "seq2seq-export", "seq2seq-average", "seq2seq-serve"
    }  # fmt: skip


def test_documented_errors_are_what_the_commands_print(tmp_path: Path) -> None:
    text = (DOCS / "configure.md").read_text()
    shown = re.findall(r"^\$ (seq2seq-train .*)\n(error: .*)$", text, re.MULTILINE)
    assert len(shown) == 2
    for command, error in shown:
        result = subprocess.run(
            [str(BIN / command.split()[0]), *command.split()[1:]], cwd=tmp_path, capture_output=True, text=True
        )
        assert result.returncode == 2 and result.stderr.splitlines() == [error]


def test_the_ctranslate2_example_runs_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ctranslate2", reason="CTranslate2 needs `pip install seq2seq[export]`")
    (example,) = re.findall(
        r"<!-- ctranslate2 example -->\n```python\n(.*?)```", (DOCS / "export.md").read_text(), re.DOTALL
    )
    checkpoint, cfg = random_checkpoint(tmp_path / "ckpt")
    export_main([f"checkpoint={checkpoint}", f"output={tmp_path / 'model-ct2'}", "format=ctranslate2"])
    # The example's positions are those of the page's model (256); this test model has fewer.
    example = example.replace("=256", f"={cfg.max_positions}").replace("=255", f"={cfg.max_positions - 1}")
    monkeypatch.chdir(tmp_path)
    result = subprocess.run([sys.executable, "-c", example + "\nprint(len(texts))"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["2"]


# ---- what the pages say about the code -----------------------------------------------------------


def test_the_built_in_alphabet_is_stated_exactly_and_the_examples_keep_to_it() -> None:
    # The README said "letters"; the task draws from the first task_alphabet letters (a-t), and
    # `z y x` came out as `F E D J`.
    letters = string.ascii_lowercase[: DataConfig.task_alphabet]
    first_run = (DOCS / "first-run.md").read_text()
    assert f"the letters {letters[0]}-{letters[-1]}" in first_run
    assert f"data.task_alphabet={DataConfig.task_alphabet}" in first_run
    for page in (README, DOCS / "first-run.md"):
        for line in re.findall(r"printf '(.*?)' \| seq2seq-translate", page.read_text()):
            words = line.replace("\\n", " ").split()
            assert set(words) <= set(letters), (page.name, line)


def test_the_results_table_holds_only_multi30k_rows() -> None:
    table = (DOCS / "results.md").read_text().split("<!-- results table")[1].split("<!-- end of results table")[0]
    rows = [line for line in table.splitlines() if line.startswith("| multi30k") or line.startswith("| builtin")]
    assert rows and all(row.startswith("| multi30k") for row in rows)


# ---- the README ----------------------------------------------------------------------------------


def test_the_readme_is_the_short_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for page in ("install", "first-run", "train", "configure", "translate", "results", "performance"):
        assert f"docs/{page}.md" in text, page
    assert "## How the code is laid out" in text.split("## Train")[0]  # near the top


def test_the_readme_holds_the_commands_ci_runs_exactly_once() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    install = 'pip install torch==2.13.0 && pip install -e ".[dev]"'
    test = "python -m pytest -q"
    assert install in ci and test in ci
    text = README.read_text()
    assert text.count(install) == 1 and text.count(test) == 1
    tests_section = text.split("## Run the tests")[1].split("\n## ")[0]
    assert install not in tests_section  # it said the install line twice


def test_the_readme_demo_log_shows_every_update_it_names() -> None:
    # It named update 800 ("as update 800 shows") in a log excerpt without that line.
    text = README.read_text()
    (log,) = re.findall(r"<!-- demo log -->\n```\n(.*?)```\n\n(.*?)\n\n", text, re.DOTALL)
    shown = set(re.findall(r"validation at update (\d+)", log[0]))
    named = set(re.findall(r"update (\d+)", log[1]))
    assert shown and named <= shown


def test_the_readme_links_lead_somewhere() -> None:
    # mkdocs --strict checks the site's links; the README is not part of the site.
    text = README.read_text()
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
