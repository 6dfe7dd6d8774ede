"""The package's imports run one way: no import circle, and no module that imports one of a higher
layer. Imports inside functions count as much as those at the top of a file (one inside a function
only hides a circle until the day that function runs first), and so do `if TYPE_CHECKING:` ones. The
source is read with `ast`; nothing is imported.

Only the imports written in the code are edges: that Python also runs a package's __init__ before a
module inside it is not one (seq2seq/inference/__init__.py imports the API's modules lazily, and every
module of the package would otherwise be in a circle with it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "seq2seq"
ROOT = "seq2seq"  # the package's own __init__: a docstring (a command prepares its process: startup.py)

# The layers, top first, as the code has them (docs/code-layout.md): a module may import modules of its
# own layer and of lower layers, never of a higher one. Each name covers a module, or a package and
# everything in it.
LAYERS: list[tuple[str, ...]] = [
    ("seq2seq.cli",),  # the console scripts' entry points: parse, then call one function of a layer below
    # seq2seq-distill: a chain over both wings (the teacher decodes, the student trains), a command of its own.
    ("seq2seq.distill",),
    ("seq2seq.serve",),  # the HTTP server, over inference (never training)
    ("seq2seq.export",),  # seq2seq-export: a checkpoint written as inference files, by artifacts' writers
    # Training (and checkpoint averaging, a tool of the training side): validation decodes with
    # inference's Translator, so it decodes as seq2seq-translate does, and a run's end writes its exports.
    ("seq2seq.train", "seq2seq.averaging"),
    ("seq2seq.inference",),  # a trained model -> translations; never imports training
    # What a run leaves on disk and the formats models travel in (checkpoints, the run directory's paths,
    # weights, CTranslate2, Marian, Argos, seq2seq-export), with the model rebuilt from them: both wings;
    # no decoding. Its run_dir.py, path_kind.py and freshness.py import no torch (tests/test_run_dir.py).
    ("seq2seq.artifacts",),
    ("seq2seq.model", "seq2seq.data"),  # the Transformer; corpora, tokenizers, batches
    # Facts about the machine and the files, each its own small module.
    (
        "seq2seq.device",
        "seq2seq.precision",
        "seq2seq.cpuinfo",
        "seq2seq.measurement_cache",
        "seq2seq.startup",
        "seq2seq.cpu_sharing",
        "seq2seq.allocator",
        "seq2seq.stop_signals",
    ),
    ("seq2seq.config",),  # typed configs, their validation, UserError
    ("seq2seq.decoding_defaults",),  # decoding's defaults and bounds, which the schemas and DecodingSettings read
]

# Beside the order, (importer, imported) pairs that may never meet: the server stands above training
# only because it is a command of its own; it never imports training, nor does inference (design.md).
NEVER = [
    ("seq2seq.serve", "seq2seq.train"),
    ("seq2seq.serve", "seq2seq.averaging"),
    ("seq2seq.inference", "seq2seq.train"),
    ("seq2seq.inference", "seq2seq.averaging"),
]


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its __init__.py)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from ..y import z
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            # `from a import b` imports the module a.b where there is one, else a name from a.
            targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    modules = set()
    for target in targets:
        while target and target not in known:  # `import a.b.name`: the module it names
            target = target.rpartition(".")[0]
        if target and target != name:
            modules.add(target)
    return modules


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def layer_of(module: str) -> int | None:
    """The index of the module's layer in LAYERS (0 is the top; the package's __init__ is above it)."""
    if module == ROOT:
        return -1
    for index, names in enumerate(LAYERS):
        if any(module == n or module.startswith(f"{n}.") for n in names):
            return index
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each is a set of
    modules every one of which imports, through the others, every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_walk_sees_imports_at_the_top_and_inside_functions() -> None:
    """The graph is what the code says: spot checks of each kind of import it must see."""
    graph = import_graph()
    assert "seq2seq.config" in graph["seq2seq.inference.choice"]  # from a import b (a name)
    assert "seq2seq.inference.int8_probe" in graph["seq2seq.inference.ctranslate2_engine"]  # from a import b (a module)
    assert "seq2seq.cli.train" in graph["seq2seq.cli.launch"]  # inside a function
    assert "seq2seq.cpu_sharing" in graph["seq2seq.startup"]  # from package import module
    assert graph[ROOT] == set()  # importing the package imports nothing of it (a command prepares the process)


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of {__file__}'s LAYERS (place each where it belongs): {unplaced}"


def test_there_are_no_import_circles() -> None:
    found = circles(import_graph())
    assert not found, "import circles (each a set of modules that import one another): " + "; ".join(
        " <-> ".join(component) for component in found
    )


def test_no_module_imports_a_higher_layer() -> None:
    graph = import_graph()
    upward = [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(module) is not None and layer_of(target) is not None and layer_of(target) < layer_of(module)
    ]
    assert not upward, "imports that run up a layer:\n" + "\n".join(upward)


def test_neither_the_server_nor_inference_imports_training() -> None:
    def within(module: str, package: str) -> bool:
        return module == package or module.startswith(f"{package}.")

    graph = import_graph()
    found = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        for importer, imported in NEVER
        if within(module, importer) and within(target, imported)
    ]
    assert not found, "imports of training where none may be:\n" + "\n".join(found)
