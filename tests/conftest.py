"""Shared test helpers: composing real configs through Hydra, and the tiny built-in run."""

from __future__ import annotations

import importlib
import io
import logging
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig
from script_module import load_script

import seq2seq.cli.train  # noqa: F401  (registers the config schema and resolvers)

# A run of the tiny model on a small slice of the built-in task: seconds, not minutes.
TINY_TRAIN = [
    "data.task_train_size=400",
    "data.task_valid_size=20",
    "batch_tokens=512",
    "max_steps=8",
    "valid_every=4",
    "save_every=4",
    "log_every=2",
    "progress=false",
    "threads=1",
    "precision=fp32",  # the same arithmetic on every CPU (auto would pick bf16 on AMX); test_precision tests auto
    "attention_images=false",  # drawing costs seconds; tests/test_dashboards.py turns it on
]

CLONE = Path(__file__).resolve().parents[1]
MULTI30K_SETTING = "SEQ2SEQ_TEST_MULTI30K"


def multi30k_candidates(environ: Mapping[str, str], clone: Path) -> list[Path]:
    """Where the Multi30k tests look for the corpus, in order (docs/contributing.md): the folder
    $SEQ2SEQ_TEST_MULTI30K names, alone, when it is set; else data/multi30k in the clone (where the README
    fetches it), then shared/data/multi30k beside the clone and beside each folder above it, nearest
    first (one copy for several clones, a clone made in a scratch folder included)."""
    if environ.get(MULTI30K_SETTING):
        return [Path(environ[MULTI30K_SETTING]).expanduser().resolve()]
    return [clone / "data" / "multi30k", *(above / "shared" / "data" / "multi30k" for above in clone.parents)]


def find_multi30k(candidates: list[Path]) -> Path | None:
    """The first folder holding every file scripts/get_multi30k.py fetches: a folder a failed or
    interrupted fetch left half full is passed over, not read by tests that would then fail."""
    names = load_script("get_multi30k").file_names()
    return next((folder for folder in candidates if all((folder / name).is_file() for name in names)), None)


MULTI30K_SEARCHED = multi30k_candidates(os.environ, CLONE)
MULTI30K = find_multi30k(MULTI30K_SEARCHED)  # None where absent: those tests skip with MULTI30K_MISSING
MULTI30K_MISSING = (
    f"Multi30k not found in {' or '.join(map(str, MULTI30K_SEARCHED))} "
    f"(set {MULTI30K_SETTING}=<folder>; docs/contributing.md)"
)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(MULTI30K_SETTING) and MULTI30K is None:  # asked for by name: never a silent skip
        raise pytest.UsageError(
            f"{MULTI30K_SETTING}={os.environ[MULTI30K_SETTING]}: not a complete Multi30k folder; "
            f"fetch it with: python scripts/get_multi30k.py {MULTI30K_SEARCHED[0]}"
        )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        one_thread_a_worker()


def one_thread_a_worker() -> None:
    """Under pytest-xdist (pyproject's addopts) each worker has a core of its own: torch's default of a
    thread a core would run two workers' four threads on 2 cores, each OpenMP team spinning while it
    waits for a thread the other worker holds. The commands a test starts in a subprocess inherit
    OMP_NUM_THREADS (a user's own is kept)."""
    import torch

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_report_header(config: pytest.Config) -> str:
    return f"multi30k: {MULTI30K or MULTI30K_MISSING}"


# A run with data.tokenizer=sentencepiece that learns enough in seconds that most lines end with </s>
# (reversal of up to 6 letters of 6): what the exports of tests/test_huggingface.py and
# tests/test_argos.py are compared with, line by line.
SENTENCEPIECE_TRAIN = [
    *TINY_TRAIN,
    "data.tokenizer=sentencepiece",
    "data.task_max_len=6",
    "data.task_alphabet=6",
    "max_steps=120",
    "valid_every=120",
    "save_every=120",
    "optim.lr=3e-3",
    "optim.warmup=30",
]
SENTENCEPIECE_LINES = [
    " ".join(random.Random(seed).choice("abcdef") for _ in range(3 + seed % 4)) for seed in range(24)
]


@pytest.fixture(scope="session")
def sentencepiece_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of SENTENCEPIECE_TRAIN, trained once per session."""
    from seq2seq.cli.train import train

    root = tmp_path_factory.mktemp("sentencepiece")
    overrides = [*SENTENCEPIECE_TRAIN, f"data.cache_dir={root / 'cache'}"]
    train(compose_config("train", overrides), root / "run", overrides=overrides)
    return root / "run"


# A multilingual run (data.directions) that learns in seconds to write a sentence's digits in the
# language its tag asks for: en3 en1 -> de3 de1 (en-de), fr3 fr1 (en-fr); de3 de1 -> en3 en1 (de-en).
# So a translation shows which language it was asked for: de-fr was never trained (zero-shot).
MULTILINGUAL_DIRECTIONS = ["en-de", "en-fr", "de-en"]
MULTILINGUAL_TRAIN = [
    *TINY_TRAIN,
    "data=parallel_files",
    f"data.directions=[{','.join(MULTILINGUAL_DIRECTIONS)}]",
    "data.vocab_size=320",
    "max_steps=100",
    "valid_every=50",
    "save_every=50",
    "optim.lr=3e-3",
    "optim.warmup=20",
]


def digit_sentence(lang: str, seed: int) -> str:
    """3-6 words of `lang`: its code and a digit, e.g. "de3 de0 de7"."""
    rng = random.Random(seed)
    return " ".join(f"{lang}{d}" for d in (rng.randrange(10) for _ in range(3 + seed % 4)))


def write_multilingual_corpus(root: Path, valid_lines: int = 6) -> list[str]:
    """train and valid files of MULTILINGUAL_DIRECTIONS (and test files of every pair of en/de/fr),
    as data.train_src=...{src}-{tgt}.{src} overrides."""
    root.mkdir(parents=True, exist_ok=True)
    pairs = [f"{a}-{b}" for a in ("en", "de", "fr") for b in ("en", "de", "fr") if a != b]
    for name in pairs:
        src, tgt = name.split("-")
        for split, count, offset in (("train", 300, 0), ("valid", valid_lines, 10_000), ("test", valid_lines, 20_000)):
            if split != "test" and name not in MULTILINGUAL_DIRECTIONS:
                continue
            for lang in (src, tgt):
                lines = [digit_sentence(lang, offset + i) for i in range(count)]
                (root / f"{split}.{name}.{lang}").write_text("\n".join(lines) + "\n")
    return [
        f"data.{split}_{side}='{root}/{split}.{{src}}-{{tgt}}.{{{side}}}'"  # quoted: Hydra reads {...} as a dict
        for split in ("train", "valid", "test")
        for side in ("src", "tgt")
    ]


def multilingual_overrides(root: Path, *extra: str) -> list[str]:
    return [
        *MULTILINGUAL_TRAIN,
        *write_multilingual_corpus(root / "corpus"),
        f"data.cache_dir={root / 'cache'}",
        *extra,
    ]


@dataclass
class TrainedRun:
    path: Path  # the run directory
    cfg: DictConfig  # the config it was trained with
    summary: dict  # what train() returned
    lines: list[str]  # its "seq2seq.train" log messages
    corpus: Path  # its files: {split}.{src}-{tgt}.{lang}


def train_multilingual(root: Path, *extra: str) -> TrainedRun:
    cfg = compose_config("train", multilingual_overrides(root, *extra))
    summary, lines = train_logging(cfg, root / "run")
    return TrainedRun(root / "run", cfg, summary, lines, root / "corpus")


@pytest.fixture(scope="session")
def multilingual_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """MULTILINGUAL_TRAIN (tags as source prefixes), trained once per session."""
    return train_multilingual(tmp_path_factory.mktemp("multilingual"))


@pytest.fixture(scope="session")
def decoder_start_run(tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    """MULTILINGUAL_TRAIN with data.lang_tag=decoder_start, trained once per session."""
    return train_multilingual(tmp_path_factory.mktemp("multilingual_decoder_start"), "data.lang_tag=decoder_start")


def train_logging(cfg: DictConfig, run_dir: Path) -> tuple[dict, list[str]]:
    """train(cfg, run_dir) with the messages of the "seq2seq.train" logger captured: (summary, lines).
    For module-scoped fixtures, where pytest's function-scoped caplog cannot be used."""
    from seq2seq.cli.train import train

    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("seq2seq.train")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        summary = train(cfg, run_dir)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return summary, lines


def compose_config(name: str, overrides: list[str]) -> DictConfig:
    from seq2seq.config import register_configs

    register_configs()  # the schemas the YAML files name (the commands register them as they start)
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        return compose(name, overrides=overrides)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokenized-data caches go to a per-session temporary directory, never to ~/.cache."""
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))


class RecordingEngine:
    """A CTranslate2 translator that records each translate_batch call (its lines and max_batch_size),
    when it was queued and when each result was taken; anything else is the translator's own."""

    def __init__(self, engine: object) -> None:
        self.engine, self.events, self.calls = engine, [], []

    def __getattr__(self, name: str) -> object:
        return getattr(self.engine, name)

    def translate_batch(self, sources: list, *args: object, **kwargs: object) -> list:
        self.events.append("queued")
        self.calls.append((len(sources), kwargs.get("max_batch_size")))
        results = self.engine.translate_batch(sources, *args, **kwargs)
        return [Taken(result, self.events) for result in results] if kwargs.get("asynchronous") else results


class Taken:
    def __init__(self, result: object, events: list) -> None:
        self._result, self._events = result, events

    def result(self) -> object:
        self._events.append("taken")
        return self._result.result()


@pytest.fixture
def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """A console script's `main` in this process, as test_cli.py's `run_cli` runs it in a subprocess, but
    without a new interpreter and its imports (seconds each): for the tests of what a command line gets
    back. Hydra's logging set-up is undone after it, so later tests log as before. test_cli.py's
    test_console_scripts_report_errors_in_one_line keeps the whole way through the installed scripts."""

    import torch  # here: the package is imported first (seq2seq/cpu_sharing.py), as in the commands

    def run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
        command, *rest = args
        module = {"seq2seq-train": "seq2seq.cli.train", "seq2seq-translate": "seq2seq.cli.translate"}[command]
        main = importlib.import_module(module).main
        monkeypatch.setattr(sys, "argv", [command, *rest])
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((stdin or "").encode())))
        monkeypatch.setenv("SEQ2SEQ_CACHE", str(cwd / "cache"))
        monkeypatch.chdir(cwd)
        before = {name: (log.handlers[:], log.level, log.propagate) for name, log in _loggers().items()}
        threads = torch.get_num_threads()  # threads= sets them for the process
        capsys.readouterr()
        try:
            main()
            status = 0
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        finally:  # Hydra's dictConfig gave loggers handlers on this test's captured streams and its run directory
            torch.set_num_threads(threads)
            for name, log in _loggers().items():
                handlers, level, propagate = before.get(name, ([], logging.NOTSET, True))
                for handler in log.handlers:
                    if handler not in handlers:
                        handler.close()
                log.handlers[:], log.propagate = handlers, propagate
                log.setLevel(level)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out.out, out.err)

    return run


def distill_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """seq2seq-distill's main in this process: (exit status, stdout, stderr)."""
    from seq2seq.cli.distill import main

    capsys.readouterr()
    try:
        main(argv)
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    out = capsys.readouterr()
    return status, out.out, out.err


def _loggers() -> dict[str, logging.Logger]:
    named = logging.root.manager.loggerDict.items()
    return {"": logging.getLogger(), **{name: log for name, log in named if isinstance(log, logging.Logger)}}
