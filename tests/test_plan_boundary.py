"""Below the commands nothing takes a command's whole config (issue 78): each command builds a frozen
plan of what it needs once, in cli/ or a plan builder named here, and passes the plan's parts down.

Read from the source (the AST), so a function added anywhere in seq2seq/ outside cli/ fails here, with
its file, line and name, when it has a parameter `cfg` or `config` typed Any, DictConfig or object (or
not typed at all), or any parameter typed as a whole command config (TranslateConfig, ServeConfig, ...).
A part of a config (a DataConfig, a ModelConfig, a dict read from a file) passes."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"
COMMAND_CONFIGS = {"TrainConfig", "TranslateConfig", "ServeConfig", "ExportConfig", "AverageConfig", "DistillConfig"}
UNTYPED = {"Any", "DictConfig", "object"}  # what a whole config goes by when it is not named
CONFIG_NAMES = {"cfg", "config"}

# Where a command's config becomes its plan: the one place each reads it (cli/ is allowed wholesale).
PLAN_BUILDERS = {
    "seq2seq/inference/job.py": {"decoding_job"},  # the decoding job of translate, serve and the Python API
    # seq2seq-train's run plan: the config after resume= and init_from=, the run directory, the corpus plan;
    # each recipe's config (recipe=), and compile=auto's choice written into the config
    "seq2seq/train/plan.py": {
        "plan_run",
        "pretrained_config",
        "language_code_data",
        "sentencepiece_config",
        "plan_recipes",
        "recipe_overrides",
        "apply_recipe",
        "with_compile",
    },
    "seq2seq/train/parts.py": {"of"},  # the parts each training room reads, from the config trained with
}
# The schema itself: its dataclasses and the validators every builder calls.
SCHEMA = "seq2seq/config.py"
# Files still to convert: empty now that train/, data/, distill/ and artifacts/ are; it must stay so (a
# file left it once no function in it took a whole config: the last test said when), and inference/ and
# serve/ never enter it.
NOT_YET_CONVERTED: list[str] = []


def _names(annotation: ast.expr | None) -> set[str]:
    """The names an annotation mentions (`TranslateConfig | DictConfig`: both), quoted ones too."""
    if annotation is None:
        return set()
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return _names(ast.parse(annotation.value, mode="eval").body)
    found = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= _names(node)
    return found


def takes_a_whole_config(argument: ast.arg) -> bool:
    names = _names(argument.annotation)
    if names & COMMAND_CONFIGS:
        return True
    return argument.arg in CONFIG_NAMES and (not names or bool(names & UNTYPED))


def whole_config_parameters(source: str) -> list[tuple[int, str, str]]:
    """(line, function, parameter) of each function in `source` that takes a whole config."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                if takes_a_whole_config(argument):
                    found.append((node.lineno, node.name, argument.arg))
    return found


def offenders() -> dict[str, list[tuple[int, str, str]]]:
    """Every module outside cli/ and the schema with such a function, plan builders left out."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name.startswith("seq2seq/cli/") or name == SCHEMA:
            continue
        builders = PLAN_BUILDERS.get(name, set())
        functions = [f for f in whole_config_parameters(path.read_text(encoding="utf-8")) if f[1] not in builders]
        if functions:
            found[name] = functions
    return found


def test_the_detector_finds_what_it_is_for() -> None:
    source = (
        "from typing import Any\n"
        "def a(cfg: Any): ...\n"
        "def b(config: 'DictConfig | None'): ...\n"
        "def c(settings: TranslateConfig): ...\n"
        "class D:\n"
        "    async def e(self, cfg): ...\n"
        "def f(cfg: DataConfig, config: dict, job: DecodingJob, *, model: ModelConfig): ...\n"
    )
    assert [(line, name) for line, name, _ in whole_config_parameters(source)] == [
        (2, "a"),
        (3, "b"),
        (4, "c"),
        (6, "e"),
    ]


def test_no_function_below_the_commands_takes_a_whole_config() -> None:
    new = {name: functions for name, functions in offenders().items() if name not in NOT_YET_CONVERTED}
    listed = [
        f"{name}:{line} {function}({parameter})" for name, found in new.items() for line, function, parameter in found
    ]
    assert not listed, "a whole config below cli/ (pass the plan's parts instead):\n" + "\n".join(listed)


def test_the_decoding_wing_is_never_allowed_one() -> None:
    assert not [name for name in NOT_YET_CONVERTED if name.startswith(("seq2seq/inference/", "seq2seq/serve/"))]
    for name, builders in PLAN_BUILDERS.items():  # each builder named is there
        defined = {
            node.name for node in ast.walk(ast.parse((ROOT / name).read_text())) if isinstance(node, ast.FunctionDef)
        }
        assert builders <= defined, (name, builders - defined)


def test_the_list_of_files_not_yet_converted_only_shrinks() -> None:
    """A file that no longer takes a whole config leaves the list, so that it cannot take one again."""
    found = offenders()  # once: in the comprehension's condition it parsed the package once a name
    clean = [name for name in NOT_YET_CONVERTED if name not in found]
    assert not clean, f"no longer take a whole config: remove them from NOT_YET_CONVERTED: {clean}"
