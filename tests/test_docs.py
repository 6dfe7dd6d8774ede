"""The documentation (README.md and docs/) says what the code does: the key reference is generated
from the schema, every documented command line is one the commands accept, the examples run, and the
README stays the short front door that CI reads its commands from."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import re
import shlex
import string
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import MULTI30K, compose_config
from script_module import load_script
from test_export import random_checkpoint

from seq2seq.cli.average import key_values
from seq2seq.cli.common import check_override_keys, parse_key_values
from seq2seq.cli.export import main as export_main
from seq2seq.cli.translate import wants_hydra
from seq2seq.config import TRAIN_GROUPS as GROUPS
from seq2seq.config import (
    AverageConfig,
    DataConfig,
    DistillConfig,
    ExportConfig,
    ServeConfig,
    TrainConfig,
    TranslateConfig,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))


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


@pytest.mark.parametrize(
    "schema", [TrainConfig, TranslateConfig, ServeConfig, ExportConfig, AverageConfig, DistillConfig]
)
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
    elif command == "seq2seq-distill":  # its own keys; data.* and train.* are seq2seq-train's
        parse_key_values([a for a in arguments if not a.startswith(("data.", "train."))], DistillConfig)
        parse_key_values(
            [a.removeprefix("train.") for a in arguments if a.startswith(("data.", "train."))], TrainConfig
        )
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
        "seq2seq-train", "seq2seq.cli.train", "seq2seq-translate", "seq2seq-export", "seq2seq-average", "seq2seq-serve",
        "seq2seq-distill",
    }  # fmt: skip


def test_documented_errors_are_what_the_commands_print(tmp_path: Path, run_main) -> None:
    text = (DOCS / "configure.md").read_text()
    shown = re.findall(r"^\$ (seq2seq-train .*)\n(error: .*)$", text, re.MULTILINE)
    assert len(shown) == 2
    for command, error in shown:
        result = run_main(command.split(), tmp_path)
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


# ---- pages checked against the code ---------------------------------------------------------------


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in requirements}


def test_the_install_page_lists_every_extra_with_what_it_pulls() -> None:
    # The table had lost `serve`, and `dev` had grown (transformers, uvicorn, selenium...) without it.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    text = (DOCS / "install.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]*) \|", text.split("## Optional extras")[1], re.MULTILINE))
    assert set(rows) == set(extras)
    for extra, requirements in extras.items():
        named = set(re.findall(r"[a-z0-9][a-z0-9_.-]*", rows[extra].lower()))
        assert _requirement_names(requirements) <= named, extra


def test_no_extra_repeats_a_core_dependency_and_the_pages_agree_where_sentencepiece_comes_from() -> None:
    # install.md said the huggingface extra brings sentencepiece, huggingface.md that seq2seq itself
    # does: pyproject listed it in both places.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = _requirement_names(project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        assert not core & _requirement_names(requirements), extra
    assert "sentencepiece" in core
    for page in ("install.md", "huggingface.md"):
        text = " ".join((DOCS / page).read_text().split())
        assert re.search(r"sentencepiece.{0,60}(core dependency|dependency of seq2seq itself|included)", text), page


def _layout_sections() -> dict[str, str]:
    """docs/code-layout.md's tree: the text of each `name/` or `name.py` entry under seq2seq/."""
    tree = blocks((DOCS / "code-layout.md").read_text(), "")[0].split("seq2seq/\n", 1)[1]
    sections, current = {}, None
    for line in tree.splitlines():
        entry = re.match(r"^  (\w+/|\w+\.py)\s", line)
        if entry:
            current = entry.group(1)
            sections[current] = line[entry.end() :]
        elif line.startswith("   ") and current:
            sections[current] += " " + line.strip()
        else:
            break  # configs/, scripts/: outside the package
    return sections


def test_the_code_layout_names_every_module() -> None:
    package = ROOT / "seq2seq"
    sections = _layout_sections()
    subpackages = {p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    assert set(sections) == subpackages | modules
    for subpackage in subpackages:
        actual = {p.name for p in (package / subpackage).glob("*.py") if p.name != "__init__.py"}
        named = set(re.findall(r"(?<![/\w])(\w+\.py)\b", sections[subpackage]))
        assert named == actual, subpackage


def test_the_reading_order_names_every_page_a_user_reads() -> None:
    order = (DOCS / "index.md").read_text().split("Read in this order:")[1]
    linked = set(re.findall(r"\]\((\w[\w-]*)\.md", order))
    assert linked == {p.stem for p in PAGES if p.stem != "index"}


def test_the_test_run_is_described_without_counts_that_go_stale() -> None:
    # "866 passed, 5 skipped in 371 s" and "About 6 minutes" were true once; pytest prints the figures.
    for page in (README, DOCS / "contributing.md"):
        text = page.read_text()
        assert not re.search(r"\d+ (passed|skipped|tests)\b|[Aa]bout \d+ minutes on 2 CPU cores", text), page.name


def test_the_quick_experiment_is_described_as_it_is_configured() -> None:
    # The page said it validated "on the first 200 validation sentences" while the log said 1014 pairs:
    # valid_max_sentences limits the translations scored, the loss is over every validation pair.
    cfg = compose_config("train", ["experiment=multi30k_quick", "data.dir=/x"])
    text = " ".join((DOCS / "train.md").read_text().split())
    paragraph = text.split("`experiment=multi30k_quick` is the hour's recipe")[1].split("It is a first look")[0]
    n = cfg.valid_max_sentences
    assert f"`max_minutes={cfg.max_minutes:g}`: validation every {cfg.valid_every} updates" in paragraph
    assert "the loss over all 1,014 validation pairs" in paragraph
    assert f"translates only the first {n} (`valid_max_sentences={n}`) for BLEU, chrF and exact match" in paragraph
    if MULTI30K is not None:  # 1,014 is the validation split's size
        assert len(gzip.decompress((MULTI30K / "val.en.gz").read_bytes()).decode().splitlines()) == 1014


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


def test_the_progress_line_in_train_md_is_one_the_dashboard_writes(tmp_path, monkeypatch) -> None:
    """The example plain progress line of docs/train.md, drawn by the Dashboard from the same figures:
    update 31 of 2,000, one update a second, update 1's loss and lr held since the read-back at update 1."""
    import seq2seq.train.reporting as module

    text = " ".join((DOCS / "train.md").read_text().split())
    (documented,) = re.findall(r"`(update 31/2000 [^`]*)`", text)
    figures = dict(re.findall(r"(loss|lr)=([^,]+)", documented)) | {"tok_s": documented.rsplit("tok_s=", 1)[1]}
    clock = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: clock[0])
    file = io.StringIO()
    dashboard = module.Dashboard(tmp_path, 0, 2000, True, stream=file)
    dashboard.scalars(1, {"train/loss": float(figures["loss"].split()[0]), "train/lr": float(figures["lr"])})
    for step in range(1, 32):
        clock[0] = float(step)
        dashboard.progress(1, tok_s=figures["tok_s"])
    dashboard.close()
    assert file.getvalue().splitlines()[-1] == documented


def test_a_link_to_a_file_the_site_leaves_out_fails_the_strict_build(tmp_path) -> None:
    """performance.md linked a results/ JSON that exclude_docs keeps out of the site: mkdocs reported the
    dead link at INFO and `mkdocs build --strict` passed. With the repository's hook it is a warning."""
    pytest.importorskip("mkdocs")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[the figures](bench.json)\n")
    (tmp_path / "docs" / "bench.json").write_text("{}\n")
    config = {"site_name": "t", "docs_dir": "docs", "exclude_docs": "bench.json\n"}
    config["hooks"] = [str(ROOT / "scripts" / "mkdocs_links.py")]
    (tmp_path / "mkdocs.yml").write_text(json.dumps(config))  # JSON is YAML
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    failed = subprocess.run(
        build, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert failed.returncode == 1, failed.stderr
    assert "WARNING -  Doc file 'index.md' contains a link to 'bench.json' which is excluded" in failed.stderr
    config["exclude_docs"] = "other.json\n"
    (tmp_path / "mkdocs.yml").write_text(json.dumps(config))
    built = subprocess.run(
        build, cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    )
    assert built.returncode == 0, built.stderr


def _log_formats() -> list[re.Pattern]:
    """Every message the package logs, as a regex: the literal text of each log call's format string
    (printf-style or an f-string) and of each string a function returns (messages logged as "%s"), its
    fields as wildcards."""
    import ast

    field = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[sdifgeEr]")

    def pattern(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = field.split(node.value.replace("%%", "\0"))
            return ".*?".join(re.escape(p).replace("\0", "%") for p in parts)
        if isinstance(node, ast.JoinedStr):
            return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".*?" for v in node.values)
        return None

    found = []
    for path in (ROOT / "seq2seq").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            text = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                text = pattern(node.args[0]) if node.func.attr in ("info", "warning", "error") else None
            elif isinstance(node, ast.Return) and node.value is not None:  # a message logged with "%s"
                text = pattern(node.value)
            if text and len(text.replace(".*?", "")) >= 3:  # not "%s", which would match any line
                found.append(re.compile(text, re.DOTALL))
    return found


@pytest.mark.parametrize("name", ["train.md", "first-run.md", "../README.md"])
def test_the_logs_shown_in_the_docs_are_in_the_form_the_code_logs(name: str) -> None:
    """Each line of an excerpted run log (`<!-- ... log -->` blocks) is one the code writes today: the
    quick run's excerpt had lines a change to the code no longer wrote, and an overrun of max_minutes
    the code no longer makes."""
    formats = _log_formats()
    logs = re.findall(r"<!-- [a-z ]*log -->\n```\n(.*?)```", (DOCS / name).read_text(), re.DOTALL)
    assert logs
    for line in "".join(logs).splitlines():
        if line != "...":
            assert any(f.fullmatch(line) for f in formats), f"{name}: no log call writes {line!r}"
    for used, minutes in re.findall(
        r"stopped: used max_minutes=([\d.]+) after \d+ updates in ([\d.]+) minutes", "".join(logs)
    ):
        assert float(minutes) <= float(used)  # the README: max_minutes holds
