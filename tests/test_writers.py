"""Every writer that replaces its own output (issue 77): the new content is a new file renamed over the
old one, so a hard link the user made to the earlier output keeps it; and one writer per output file:
while another process writes it, a command is refused in one line and the first one's result stays.

The writers: seq2seq-translate's output= and attention=, seq2seq-average's output=, a training run's
checkpoints and exports, seq2seq-distill's files, seq2seq-export's output=. The server writes only new
names into a folder it made (nothing of its own to replace)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config
from lock_holder import hold_lock_in_another_process
from omegaconf import OmegaConf

from seq2seq.artifacts.checkpoint import atomic_save, load_checkpoint
from seq2seq.artifacts.exports import write_run_exports
from seq2seq.artifacts.replacing import write_new_json
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.cli.export import export_plan
from seq2seq.cli.translate import translate
from seq2seq.config import ExportConfig, UserError
from seq2seq.distill import corpus as distill_corpus
from seq2seq.export.command import export


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from seq2seq.cli.train import train

    root = tmp_path_factory.mktemp("writers")
    overrides = [*TINY_TRAIN, "data.task_train_size=200", "max_steps=2", "valid_every=2", "save_every=2"]
    with pytest.MonkeyPatch.context() as patch:  # module scope: conftest's per-test cache is not set yet
        patch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))
        train(compose_config("train", [*overrides, f"data.cache_dir={root / 'cache'}"]), root / "run")
    return root / "run"


def translating(run: Path, tmp: Path, *extra: str) -> Callable[[int], Path]:
    """Writes `lines` lines' translations to tmp/o.txt (or what `extra` names) with seq2seq-translate."""

    def write(lines: int) -> Path:
        source = tmp / f"input{lines}.txt"
        source.write_text("".join(f"a b {'c ' * (n + lines)}\n" for n in range(lines)))
        translate(compose_config("translate", [f"run={run}", f"input={source}", "beam=1", *extra]))
        return tmp / "o.txt"

    return write


def translate_output(run: Path, tmp: Path) -> Callable[[int], Path]:
    return translating(run, tmp, f"output={tmp / 'o.txt'}")


def translate_attention(run: Path, tmp: Path) -> Callable[[int], Path]:
    write = translating(run, tmp, f"output={tmp / 'o.txt'}", f"attention={tmp / 'plots'}", "engine=torch")

    def plot(lines: int) -> Path:
        write(lines)
        return tmp / "plots" / "sentence_000000.png"

    return plot


def checkpoint_payload(value: float) -> dict:
    return {
        "format": 1,
        "model": {"w": torch.full((2, 3), value)},
        "config": {"model": {"d_model": 8}},
        "vocab": {"src_size": 10, "tgt_size": 10, "pad_id": 0},
        "step": 1,
        "metrics": {},
        "optimizer": {"state": torch.ones(1)},
    }


def average_output(run: Path, tmp: Path) -> Callable[[int], Path]:
    from seq2seq.cli.average import average_files

    def average(value: int) -> Path:
        inputs = [tmp / f"a{value}.pt", tmp / f"b{value}.pt"]
        for path, weight in zip(inputs, (value, value + 2), strict=True):
            atomic_save(checkpoint_payload(float(weight)), path)
        return average_files(inputs, tmp / "averaged.pt")

    return average


def training_checkpoint(run: Path, tmp: Path) -> Callable[[int], Path]:
    def save(value: int) -> Path:  # the trainer's save of last.pt
        atomic_save(checkpoint_payload(float(value)), tmp / "checkpoints" / "last.pt")
        return tmp / "checkpoints" / "last.pt"

    return save


def run_exports(run: Path, tmp: Path) -> Callable[[int], Path]:
    """model/ of a run written again (a resumed run's end) after its best.pt changed."""
    import shutil

    copy = tmp / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))

    def export_again(value: int) -> Path:
        best = RunDir(copy).checkpoint("best")
        payload = load_checkpoint(best)
        payload["model"] = {k: v + value for k, v in payload["model"].items()}
        atomic_save(payload, best)
        assert not isinstance(write_run_exports(copy)["model"], UserError)
        return copy / "model" / "model.safetensors"

    return export_again


def distill_json(run: Path, tmp: Path) -> Callable[[int], Path]:
    def write(value: int) -> Path:
        write_new_json(tmp / "state.json", {"seconds": value})
        return tmp / "state.json"

    return write


def distill_lines(run: Path, tmp: Path) -> Callable[[int], Path]:
    def write(value: int) -> Path:
        lines = [str(n) for n in range(value)]
        distill_corpus._write(tmp, "train", {"src-tgt": (lines, lines)})
        return tmp / "train.src-tgt.src"

    return write


WRITERS = {
    "seq2seq-translate output=": translate_output,
    "seq2seq-translate attention=": translate_attention,  # PyTorch and matplotlib: a few seconds
    "seq2seq-average output=": average_output,
    "a run's checkpoint": training_checkpoint,
    "a run's exports": run_exports,
    "seq2seq-distill's JSON files": distill_json,
    "seq2seq-distill's corpus files": distill_lines,
}


@pytest.mark.parametrize(
    "writer", [pytest.param(w, marks=pytest.mark.slow) if "attention" in w else w for w in WRITERS]
)
def test_a_hard_link_to_an_earlier_output_keeps_its_content(run, tmp_path, writer):
    write = WRITERS[writer](run, tmp_path)
    output = write(3)
    before = output.read_bytes()
    os.link(output, tmp_path / "keep")
    assert write(1) == output
    assert output.read_bytes() != before, "the second write should change the output"
    assert (tmp_path / "keep").read_bytes() == before


def test_two_translations_into_one_file_the_second_is_refused(run, tmp_path):
    write = translate_output(run, tmp_path)
    output = write(20)  # the first one's result
    before = output.read_text()
    holder = hold_lock_in_another_process(output)  # as a seq2seq-translate writing it now would
    try:
        with pytest.raises(UserError) as info:
            write(3)
    finally:
        holder.communicate("")
    assert str(info.value) == (
        f"output={output}: another process (seq2seq-translate, process {holder.pid}) is writing this file; "
        "wait for it to end, or give output= another file"
    )
    assert output.read_text() == before and before.count("\n") == 20


def test_an_interrupted_translation_leaves_the_earlier_output_as_it_was(run, tmp_path, monkeypatch, caplog):
    import seq2seq.inference.command as command

    write = translate_output(run, tmp_path)
    output = write(5)
    before = output.read_bytes()

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the translations are written

    monkeypatch.setattr(command, "_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(2)
    assert output.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input2.txt", "input5.txt", "o.txt"]
    assert f"output={output}: left as it was; the translation was interrupted" in caplog.text


@pytest.mark.parametrize(
    ("writer", "output"),
    [
        ("seq2seq-average", "averaged.pt"),
        ("seq2seq-export", "exported"),
        ("seq2seq-translate attention=", "plots"),
    ],
)
def test_every_writer_of_a_file_someone_else_is_writing_is_refused(run, tmp_path, writer, output):
    from seq2seq.cli.average import average_files

    target = tmp_path / output
    if writer == "seq2seq-average":
        inputs = [tmp_path / "a.pt", tmp_path / "b.pt"]
        for path in inputs:
            atomic_save(checkpoint_payload(1.0), path)
        write: Callable[[], object] = lambda: average_files(inputs, target)  # noqa: E731
    elif writer == "seq2seq-export":
        cfg = OmegaConf.structured(ExportConfig(run=str(run), output=str(target)))
        write = lambda: export(export_plan(cfg))  # noqa: E731
    else:
        write = lambda: translating(run, tmp_path, f"attention={target}", "engine=torch")(1)  # noqa: E731
    holder = hold_lock_in_another_process(target, "another command")
    try:
        with pytest.raises(UserError, match=f"another process \\(another command, process {holder.pid}\\) is writ"):
            write()
    finally:
        holder.communicate("")
    assert not target.exists()


@pytest.mark.slow
def test_two_seq2seq_translate_processes_at_once_the_first_result_survives(run, tmp_path):
    """The review's case as it was run: 200 lines and 3 lines into one output= at once. The first one
    reads a FIFO, so it is still translating (and holds output=) for as long as the test keeps it open."""
    import subprocess
    import sys
    import time

    binary = Path(sys.executable).parent / "seq2seq-translate"
    output, lock, fifo = tmp_path / "o.txt", tmp_path / ".o.txt.lock", tmp_path / "in200"
    os.mkfifo(fifo)
    (tmp_path / "in3.txt").write_text("a b\n" * 3)
    command = [str(binary), f"run={run}", f"output={output}", "beam=1", "threads=1"]
    first = subprocess.Popen([*command, f"input={fifo}"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (lock.is_file() and lock.read_text()) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until the first one holds the lock (it writes its process id once it does)
    second = subprocess.run([*command, f"input={tmp_path / 'in3.txt'}"], capture_output=True, text=True, timeout=120)
    with fifo.open("w") as source:  # the first one's 200 lines
        source.write("".join(f"a b {'c ' * (n % 7)}\n" for n in range(200)))
    first_err = first.communicate(timeout=120)[1]
    assert first.returncode == 0, first_err
    assert (second.returncode, second.stderr.splitlines()[-1]) == (
        2,
        f"error: output={output}: another process (seq2seq-translate, process {first.pid}) is writing this file; "
        "wait for it to end, or give output= another file",
    )
    assert output.read_text().count("\n") == 200 and not lock.exists()


# Every module of the package that writes files itself (opens one for writing, renames, makes a temporary
# file or folder), and the rule its writes follow; a module that writes through another's function
# (seq2seq-average through checkpoint.atomic_save, under output_lock) is that one's. A module that starts
# to write fails test_every_module_that_writes_files_is_listed_with_its_rule until it is listed here with
# the rule it follows, or the reason it needs none.
WRITER_RULES = {
    # A file the user names: replacing.writing_file or output_lock (the lock, the ledger, a new file renamed).
    "seq2seq.artifacts.replacing": "the rule itself, and the ledger (a new file renamed over the old)",
    "seq2seq.inference.command": "output=: replacing.writing_file; attention=: output_lock",
    "seq2seq.inference.attention_plots": "replacing.write_new_file, in attention= held by output_lock",
    "seq2seq.artifacts.argos": "the package's files in the new folder of export's replacing.new_output",
    # Files inside a directory the command writes into (a staging directory, or its own folder it locks).
    "seq2seq.artifacts.checkpoint": "atomic_save: a new file renamed over the old",
    "seq2seq.artifacts.file_lock": "the lock files themselves",
    "seq2seq.artifacts.safetensors": "into export's staging directory",
    "seq2seq.artifacts.ctranslate2_model": "into export's staging directory",
    "seq2seq.artifacts.marian": "into export's staging directory",
    "seq2seq.train.command": "the run directory under train/lock.py: cleaning.json copied in",
    "seq2seq.train.run_outputs": "the run directory under train/lock.py: its marker, made once (clear_leftovers)",
    "seq2seq.distill.output": "distill.log appended, in the folder file_lock.held holds",
    "seq2seq.distill.translations": "translations.jsonl appended under file_lock.held, cut back to its count",
    "seq2seq.data.parallel_corpus": "seq2seq-distill's corpus files, into replacing.write_files_into's new folder",
    "seq2seq.data.pipeline": "the cache's staging directory, renamed into place (cache_builds.py)",
    "seq2seq.data.sentencepiece_training": "into the cache build's staging directory",
    "seq2seq.data.cleaning": "cleaning.json into the cache build's staging directory",
    "seq2seq.data.fairseq_vocab": "a pretrained model's vocabulary into the cache build's staging directory and its run",
    "seq2seq.artifacts.m2m100": "format=huggingface: into export's staging directory",
    "seq2seq.measurement_cache": "the machine's cache: a new file renamed over the old",
    "seq2seq.serve.app": "a temporary folder of its own for translated files",
    "seq2seq.serve.command": "a temporary folder of its own for translated files, removed at exit",
    "seq2seq.distill.student": "the student run's train.log appended, in the run directory it trains",
    "seq2seq.serve.libretranslate": "new names only, in the server's own folder",
    "seq2seq.cli.common": "opens /dev/null as stdout",
}
FILE_WRITING_CALLS = {"write_text", "write_bytes", "savefig", "save_file", "mkstemp", "mkdtemp", "FileHandler"}
OS_WRITING_CALLS = {"replace", "rename", "link", "truncate", "ftruncate", "pwrite", "open", "mkfifo"}


def writes_files(tree: object) -> bool:
    import ast

    for node in ast.walk(tree):  # type: ignore[arg-type]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        if name in FILE_WRITING_CALLS or (owner == "os" and name in OS_WRITING_CALLS):
            return True
        if (owner, name) in {("torch", "save"), ("tempfile", "TemporaryDirectory")}:
            return True
        if name == "open" and owner != "os":  # open(path, mode) or Path.open(mode)
            positional = node.args[1:2] if isinstance(func, ast.Name) else node.args[:1]  # the mode's place
            given = [*positional, *(k.value for k in node.keywords if k.arg == "mode")]
            modes = [a.value for a in given if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if any(set(mode) & set("wax+") for mode in modes):
                return True
    return False


def test_every_module_that_writes_files_is_listed_with_its_rule():
    import ast

    package = Path(__file__).resolve().parents[1] / "seq2seq"
    writing = set()
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        if writes_files(ast.parse(path.read_text(encoding="utf-8"))):
            writing.add(module)
    assert sorted(writing - set(WRITER_RULES)) == [], "a module writes files: list it with the rule it follows"
    assert sorted(set(WRITER_RULES) - writing) == [], "listed as a writer but writes nothing: take it out"


# --- one rule for writing over files (issue 78) ------------------------------------------------------
# Every function that writes what a command outputs where the user names it, and the names of
# replacing.py (the rule's one home: the ledger, the lock, new files renamed into place, folders
# claimed by their marker) each calls. A function of these commands' modules that writes, renames or
# removes a file by itself bypasses the rule: it fails the test below by name, unless NOT_OUTPUTS
# says why what it writes is no output the rule is for.
OUTPUT_WRITERS = {
    "seq2seq.inference.command.translate": {"writing_file", "output_lock"},  # output=, attention=
    "seq2seq.inference.attention_plots.save_png": {"write_new_file"},  # attention='s pictures
    "seq2seq.cli.average.average_files": {"output_lock", "record"},  # output=, then the ledger's entry
    "seq2seq.cli.average.refuse_replacing": {"check_replaceable"},
    "seq2seq.export.command.export": {"check_new", "new_output"},  # output= must be new
    "seq2seq.artifacts.exports.write_directory": {"new_output", "replaced_folder"},  # and a run's exports
    "seq2seq.artifacts.exports.remove_stale_export_directories": {"remove_folder_leftovers"},
    "seq2seq.distill.output.claim_output": {"claim_folder"},  # seq2seq-distill's output= folder
    "seq2seq.distill.corpus._write": {"write_files_into"},  # ... and its corpus files
}
OUTPUT_MODULES = (
    "seq2seq.inference.command",
    "seq2seq.inference.attention_plots",
    "seq2seq.cli.average",
    "seq2seq.averaging",
    "seq2seq.artifacts.exports",
    "seq2seq.export.",
    "seq2seq.artifacts.argos",
    "seq2seq.distill.",
)
NOT_OUTPUTS = {
    "seq2seq.inference.command._open_output": "opens the new file writing_file yields (or output='s device)",
    "seq2seq.inference.attention_plots.save_png.draw": "draws into the new file write_new_file yields",
    "seq2seq.artifacts.argos.argos_writer._write": "the package's files, inside new_output's new folder",
    "seq2seq.distill.output._logging": "distill.log appended, in the folder claim_output took and held holds",
    "seq2seq.distill.student._train_log": "the student run's train.log appended, as seq2seq-train's Hydra does",
    "seq2seq.distill.translations._translate_held": "the cache's translations.jsonl appended, cut to its count",
    "seq2seq.distill.translations._cut_to_count": "the cache's translations.jsonl cut back to what it counted",
}
REMOVING_CALLS = {"rmtree", "unlink", "rmdir", "remove", "removedirs", "move", "copyfile", "copytree"}


def functions_that_write(module: str, tree: object) -> dict[str, set[str]]:
    """{qualified function name: the names it calls} of each function in `tree` that writes, renames
    or removes a file itself (writes_files, and the removing calls); nested functions by their own name."""
    import ast

    found: dict[str, set[str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    own = ast.Module(body=[s for s in child.body if not _defines(s)], type_ignores=[])
                    called = {_called_name(c) for c in ast.walk(own) if isinstance(c, ast.Call)}
                    if writes_files(own) or called & REMOVING_CALLS:
                        found[name] = called
                visit(child, name)

    visit(tree, module)  # type: ignore[arg-type]
    return found


def _defines(statement: object) -> bool:
    import ast

    return isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)


def _called_name(call: object) -> str:
    import ast

    func = call.func  # type: ignore[attr-defined]
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def calls_of(qualified: str) -> set[str]:
    """The names the function `qualified` (module.function) calls, nested functions included."""
    import ast

    module, _, function = qualified.rpartition(".")
    path = Path(__file__).resolve().parents[1] / (module.replace(".", "/") + ".py")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return {_called_name(c) for c in ast.walk(node) if isinstance(c, ast.Call)}
    raise AssertionError(f"{qualified}: no such function")


def test_the_detector_finds_a_writer_and_a_remover_by_name():
    import ast

    source = (
        "import shutil\n"
        "def kept(path):\n    return path.read_text()\n"
        "def writes(path):\n    path.write_text('x')\n"
        "def removes(path):\n    shutil.rmtree(path)\n"
        "def outer(path):\n    def inner(file):\n        open(file, 'w')\n    return inner\n"
    )
    assert sorted(functions_that_write("m", ast.parse(source))) == ["m.outer.inner", "m.removes", "m.writes"]


def test_every_command_output_is_written_through_the_one_rule():
    """The commands' writers call replacing.py, and nothing else in their modules writes or removes a
    file itself (an export's own existence check and renames, distill's own marker: gone)."""
    import ast

    package = Path(__file__).resolve().parents[1] / "seq2seq"
    bypassing = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        if not module.startswith(OUTPUT_MODULES):
            continue
        for name in functions_that_write(module, ast.parse(path.read_text(encoding="utf-8"))):
            if name not in NOT_OUTPUTS:
                bypassing.append(name)
    assert bypassing == [], "writes or removes files itself: go through seq2seq/artifacts/replacing.py"
    for writer, rule in OUTPUT_WRITERS.items():
        assert rule <= calls_of(writer), f"{writer} no longer calls {sorted(rule - calls_of(writer))}"
    for name in NOT_OUTPUTS:  # each one listed still writes
        module = name.split(".")
        for cut in range(len(module) - 1, 0, -1):
            path = package.parent / ("/".join(module[:cut]) + ".py")
            if path.is_file():
                tree = ast.parse(path.read_text(encoding="utf-8"))
                assert name in functions_that_write(".".join(module[:cut]), tree), f"{name} writes nothing now"
                break
