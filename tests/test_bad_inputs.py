"""Bad and unusual inputs to training and translation: each either works or stops with one error that
names the file, key or line. In-process (train(), translate()), except the closed-pipe test, which
needs a real process. Messages are compared exactly: they are what a user reads."""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import unicodedata
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.cli.train import train
from seq2seq.cli.translate import translate
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.pipeline import prepare_data
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.model.transformer import build_model
from seq2seq.train.lock import run_directory_lock

# A run of the tiny model small enough for a test; max_positions=80 (the least the built-in task's
# data.max_tokens=64 allows) makes a line "longer than the model" cheap to translate.
SMALL_RUN = [*TINY_TRAIN, "data.task_train_size=200", "max_steps=2", "valid_every=2", "model.max_positions=80"]


# --- training: configuration and output directory -----------------------------------------------


@pytest.mark.parametrize(
    ("make_run_dir", "reason"),
    [
        (lambda tmp: (tmp / "file").touch() or tmp / "file" / "run", "Not a directory"),
        (lambda tmp: (tmp / "file").touch() or tmp / "file", "File exists"),
        (lambda tmp: tmp / ("x" * 300), "File name too long"),
    ],
    ids=["parent-is-a-file", "run-dir-is-a-file", "name-too-long"],
)
def test_unwritable_run_directory_stops_before_any_work(tmp_path, make_run_dir, reason):
    run_dir = make_run_dir(tmp_path)
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(UserError) as info:
        train(cfg, run_dir)
    assert str(info.value) == f"{run_dir}: the run directory is not writable ({reason})"
    assert not (tmp_path / "cache").exists()  # the corpus was not even read


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_run_directory_stops_before_any_work(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(UserError) as info:
        train(cfg, locked / "run")
    assert str(info.value) == f"{locked / 'run'}: the run directory is not writable (Permission denied)"


def test_a_second_run_into_a_busy_run_directory_is_refused_naming_the_holder(tmp_path):
    # Two runs into one directory both "succeeded", their checkpoints, config and log mixed.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}"])
    with run_directory_lock(run_dir):  # what the first run holds while it trains
        with pytest.raises(UserError) as info:
            train(cfg, run_dir)
    assert str(info.value) == (
        f"{run_dir}: another seq2seq-train (process {os.getpid()}) is using this run directory; "
        "wait for it to end or choose another directory"
    )
    assert not (tmp_path / "cache").exists() and not (run_dir / "checkpoints").exists()


def test_a_new_run_into_a_directory_holding_what_no_run_wrote_is_refused(tmp_path):
    # A file under a name a run writes that is not a run's: a new run would write over it.
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_4.pt").write_bytes(b"not a checkpoint")
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(UserError) as info:
        train(cfg, run_dir)
    assert str(info.value) == (
        f"{run_dir}: holds checkpoints/step_4.pt, which no seq2seq run wrote; a run there would replace or mix "
        "with it: move it away or choose another directory"
    )
    assert not (tmp_path / "cache").exists()  # refused before any work


def test_a_new_run_into_a_directory_holding_a_run_is_refused(tmp_path):
    run_dir, cache = tmp_path / "run", f"data.cache_dir={tmp_path / 'cache'}"
    train(compose_config("train", [*SMALL_RUN, cache]), run_dir)
    with pytest.raises(UserError) as info:
        train(compose_config("train", [*SMALL_RUN, cache]), run_dir)
    assert str(info.value) == (
        f"{run_dir}: holds an earlier run (checkpoints/best.pt); continue it with resume={run_dir}, "
        "start afresh there with overwrite=true, or choose another directory"
    )


def test_overwrite_replaces_an_earlier_run_without_leaving_any_of_it(tmp_path):
    run_dir, cache = tmp_path / "run", f"data.cache_dir={tmp_path / 'cache'}"
    train(compose_config("train", [*SMALL_RUN, cache, "max_steps=4", "save_every=2", "keep_checkpoints=5"]), run_dir)
    assert (run_dir / "checkpoints" / "step_4.pt").is_file()
    train(compose_config("train", [*SMALL_RUN, cache, "max_steps=2", "save_every=2", "overwrite=true"]), run_dir)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.pt", "last.pt", "step_2.pt"]
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 2
    assert len(list((run_dir / "tb").glob("events.out.tfevents.*"))) == 1  # the earlier run's dashboards went too


def test_batch_smaller_than_one_sentence_stops_before_any_work(tmp_path):
    cfg = compose_config("train", [*SMALL_RUN, "batch_tokens=40", f"data.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(UserError) as info:
        train(cfg, tmp_path / "run")
    assert str(info.value) == (
        "config error: batch_tokens=40: must hold at least one sentence of data.max_tokens=64 (+BOS/EOS)"
    )
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


# --- training: corpus files ---------------------------------------------------------------------


def files_config(tmp_path: Path, files: dict[str, bytes], *extra: str) -> object:
    """A parallel_files config over `files` {train_src: bytes, ...}, written under tmp_path."""
    overrides = ["data=parallel_files", f"data.cache_dir={tmp_path / 'cache'}", "data.vocab_size=300"]
    for key, data in files.items():
        (tmp_path / key).write_bytes(data)
        overrides.append(f"data.{key}={tmp_path / key}")
    common = ["batch_tokens=512", "max_steps=2", "valid_every=2", "save_every=2", "progress=false", "threads=1"]
    return compose_config("train", [*overrides, *common, "attention_images=false", *extra])


@pytest.mark.parametrize(
    ("train_src", "train_tgt", "expected"),
    [
        (b"a\nb\nc\n", b"A\nB\n", "{src} has 3 lines but {tgt} has 2: they must pair up"),
        (b"", b"", "the train split of data.kind=parallel_files is empty: no pairs in {src} and {tgt}"),
    ],
    ids=["line-counts-differ", "empty"],
)
def test_training_files_that_cannot_train_name_both_files(tmp_path, train_src, train_tgt, expected):
    files = {"train_src": train_src, "train_tgt": train_tgt, "valid_src": b"v\n", "valid_tgt": b"V\n"}
    with pytest.raises(UserError) as info:
        train(files_config(tmp_path, files), tmp_path / "run")
    assert str(info.value) == expected.format(src=tmp_path / "train_src", tgt=tmp_path / "train_tgt")


MESSY = [
    "\ufeffthe cat sits on the mat",  # a BOM, which only the first line of a file may carry
    "tab\tseparated\x01control\x1b[0m and DEL\x7f",
    "zero\u200bwidth\u200djoiners\u2060and\ufeffBOMs inside",
    "emoji 🙂 👨\u200d👩\u200d👧 🇩🇪 and ❤️",
    "Кошка sits на ковре 猫 マット قطة",
    "नमस्ते दुनिया 한국어 Ελληνικά",
    "Cafe\u0301 na\u0303o",  # combining accents (NFC composes them)
    "a lone \r carriage return inside",
]
LONG_LINE = " ".join(f"word{i % 97}" for i in range(20_000))[:100_000]


def crlf(lines: list[str]) -> bytes:
    return "".join(line + "\r\n" for line in lines).encode("utf-8")


@pytest.fixture(scope="module")
def messy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """Trains 2 updates on Windows line endings, a BOM, control and zero-width characters, emoji and
    mixed scripts, with one 100,000-character source line. Returns (config, summary, log lines)."""
    tmp = tmp_path_factory.mktemp("messy")
    train_lines = [f"{line} {i}" if i else line for i in range(5) for line in MESSY]
    sources = [*train_lines[:17], LONG_LINE, *train_lines[17:]]
    targets = [*train_lines[:17], "short target", *train_lines[17:]]
    files = {"train_src": crlf(sources), "train_tgt": crlf(targets), "valid_src": crlf(MESSY), "valid_tgt": crlf(MESSY)}
    cfg = files_config(tmp, files, "log_every=1")
    summary, records = train_logging(cfg, tmp / "run")
    return cfg, summary, records


def test_messy_text_trains_and_is_read_as_written(messy_run):
    cfg, summary, _ = messy_run
    assert summary["step"] == 2 and summary["reason"] == "reached max_steps=2"
    assert set(summary["metrics"]) >= {"loss", "bleu", "chrf", "accuracy"}
    assert all(torch.isfinite(torch.tensor(v)) for v in summary["metrics"].values())
    # What the run trained and validated on: no "\r" from the line endings, no leading BOM, and every
    # other character kept (a lone "\r" inside a line is text, not a line break).
    valid = prepare_data(cfg.data).valid  # from the run's cache
    expected = [MESSY[0].removeprefix("\ufeff"), *MESSY[1:]]
    assert valid.src_text == valid.tgt_text == expected
    tokenizers = Tokenizers.load(Path(summary["run_dir"]))
    assert tokenizers.decode_tgt(tokenizers.encode_tgt(expected)) == [unicodedata.normalize("NFC", x) for x in expected]


def test_a_100000_character_line_is_dropped_and_counted(messy_run):
    _, _, records = messy_run
    pairs = 5 * len(MESSY) + 1
    assert (
        f"data: {pairs - 1} training pairs kept, 1 dropped (0 empty, 1 too long, 0 length ratio); 8 validation pairs"
        in records
    )


# --- translation --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("translate")
    train(compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp / 'cache'}"]), tmp / "run")
    return tmp / "run"


def translate_file(run: Path, tmp_path: Path, data: bytes, *extra: str) -> tuple[dict, bytes]:
    """Translates `data` (the input file's bytes) in-process; returns translate()'s result and the output bytes."""
    source, target = tmp_path / "input.txt", tmp_path / "output.txt"
    source.write_bytes(data)
    cfg = compose_config("translate", [f"run={run}", f"input={source}", f"output={target}", "beam=1", *extra])
    return translate(cfg), target.read_bytes()


def test_empty_input_file_gives_empty_output(run_dir, tmp_path):
    result, output = translate_file(run_dir, tmp_path, b"")
    assert result["lines"] == 0 and output == b""


def test_input_from_a_pipe_a_fifo_or_a_device_is_read_and_a_directory_refused(run_dir, tmp_path):
    # input=/dev/stdin, input=<(...) (a pipe, /dev/fd/N) and input=/dev/null were "is not a file".
    lines = b"a b c\nd e f\n"
    _, expected = translate_file(run_dir, tmp_path, lines)
    assert expected.count(b"\n") == 2

    def translated(source: str) -> tuple[dict, bytes]:
        target = tmp_path / "from-stream.txt"
        cfg = compose_config("translate", [f"run={run_dir}", f"input={source}", f"output={target}", "beam=1"])
        return translate(cfg), target.read_bytes()

    read_end, write_end = os.pipe()
    os.write(write_end, lines)  # fits the pipe's buffer: no writer thread needed
    os.close(write_end)
    try:
        assert translated(f"/dev/fd/{read_end}")[1] == expected  # what bash's <(...) gives
    finally:
        os.close(read_end)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(lines))  # opening blocks until read
    writer.start()
    assert translated(str(fifo))[1] == expected
    writer.join()
    assert translated("/dev/null") == ({"lines": 0, "seconds": pytest.approx(0, abs=60)}, b"")
    with pytest.raises(UserError) as info:
        translated(str(tmp_path))
    assert str(info.value) == f"{tmp_path}: is a directory; give input= a file of lines (or - for standard input)"


@pytest.mark.parametrize("data", [b"\n", b"\n\n\n\n\n", b"\r\n\r\n\r\n", b"  \n\t\n"])
def test_only_empty_lines_give_as_many_empty_lines(run_dir, tmp_path, data):
    result, output = translate_file(run_dir, tmp_path, data)
    assert result["lines"] == data.count(b"\n")
    assert output == b"\n" * data.count(b"\n")


def test_line_longer_than_the_model_is_truncated_with_a_warning(run_dir, tmp_path, caplog):
    long_line = "".join(f"{'abcdefghijklmnopqrst'[i % 20]} " for i in range(50_000))  # 100,000 characters
    tokens = len(Tokenizers.load(run_dir).encode_src([long_line])[0])
    assert tokens > 80
    with caplog.at_level(logging.WARNING, logger="seq2seq.inference.translator"):
        result, output = translate_file(run_dir, tmp_path, f"a b c\n{long_line}\nd e f\n".encode())
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"input line 2 has {tokens} tokens, more than the model's 80 positions: translating its first 79"
    ]
    assert result["lines"] == 3 and output.count(b"\n") == 3


def test_unwritable_output_is_one_line_naming_it(run_dir, tmp_path):
    (tmp_path / "file").touch()
    target = tmp_path / "file" / "out.txt"  # like a read-only file system: open() raises OSError
    (tmp_path / "input.txt").write_text("a b c\n")
    cfg = compose_config("translate", [f"run={run_dir}", f"input={tmp_path / 'input.txt'}", f"output={target}"])
    with pytest.raises(UserError) as info:
        translate(cfg)
    assert str(info.value) == f"output={target}: cannot write there (Not a directory)"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_while_writing_translations_is_one_line(run_dir, tmp_path):
    (tmp_path / "input.txt").write_text("a b c\n")
    cfg = compose_config("translate", [f"run={run_dir}", f"input={tmp_path / 'input.txt'}", "output=/dev/full"])
    with pytest.raises(UserError) as info:
        translate(cfg)
    assert str(info.value) == "/dev/full: cannot write the translations (No space left on device)"


@pytest.mark.parametrize("how", ["same-path", "other-path", "symlink", "hard-link"])
def test_output_that_is_the_input_file_is_refused_before_it_is_emptied(run_dir, tmp_path, how):
    # It was opened for writing before the input was read: exit 0, "translated 0 lines", the file emptied.
    source = tmp_path / "same.txt"
    source.write_text("a b c\nd e f\n")
    output = {
        "same-path": source,
        "other-path": tmp_path / "sub" / ".." / "same.txt",
        "symlink": tmp_path / "link.txt",
        "hard-link": tmp_path / "hard.txt",
    }[how]
    (tmp_path / "sub").mkdir()
    if how == "symlink":
        output.symlink_to(source)
    elif how == "hard-link":
        os.link(source, output)
    cfg = compose_config("translate", [f"run={run_dir}", f"input={source}", f"output={output}", "beam=1"])
    with pytest.raises(UserError) as info:
        translate(cfg)
    assert str(info.value) == (
        f"output={output} is the same file as input={source}: writing the translations would empty it"
    )
    assert source.read_text() == "a b c\nd e f\n"


def test_output_that_is_the_reference_is_refused(run_dir, tmp_path):
    # The reference was read after the translations were written over it: BLEU 100 against itself.
    (tmp_path / "input.txt").write_text("a b c\n")
    reference = tmp_path / "reference.txt"
    reference.write_text("C B A\n")
    options = [f"run={run_dir}", f"input={tmp_path / 'input.txt'}", f"output={reference}", f"reference={reference}"]
    with pytest.raises(UserError) as info:
        translate(compose_config("translate", options))
    assert str(info.value) == (
        f"output={reference} is the same file as reference={reference}: writing the translations would empty it"
    )
    assert reference.read_text() == "C B A\n"


@pytest.mark.parametrize(
    ("model", "written"),
    [
        ("checkpoint=R/checkpoints/best.pt", "R/checkpoints/best.pt"),
        ("checkpoint=R/checkpoints/best.pt", "R/tokenizer.json"),
        ("checkpoint=R/checkpoints/best.pt", "R/train.log"),
        ("run=R", "R/model/model.safetensors"),
        ("run=R", "R/checkpoints/last.pt"),
        ("checkpoint=R/model", "R/model/config.json"),
    ],
)
def test_output_onto_a_file_the_model_is_read_from_is_refused(run_dir, tmp_path, model, written):
    # checkpoint=R/checkpoints/best.pt output=R/checkpoints/best.pt exited 0 and left a 24-byte best.pt.
    run = tmp_path / "R"
    shutil.copytree(run_dir, run)
    (run / "train.log").write_text("the run's log\n")
    (tmp_path / "input.txt").write_text("a b c\n")
    output = tmp_path / written
    before = output.read_bytes()
    options = [model.replace("R", str(run)), f"input={tmp_path / 'input.txt'}", f"output={output}", "beam=1"]
    with pytest.raises(UserError) as info:
        translate(compose_config("translate", options))
    key = model.split("=")[0] + "=" + model.split("=")[1].replace("R", str(run))
    assert str(info.value) == f"output={output} is {output}, which {key} reads: writing the translations would empty it"
    assert output.read_bytes() == before


def test_a_run_with_a_broken_best_pt_names_it_and_the_runs_other_models(run_dir, tmp_path):
    # It was refused with PyTorch's advice to set weights_only=False, its intact model/ and ctranslate2/ unsaid.
    run = tmp_path / "R"
    shutil.copytree(run_dir, run)
    best = run / "checkpoints" / "best.pt"
    with zipfile.ZipFile(run_dir / "checkpoints" / "best.pt") as original, zipfile.ZipFile(best, "w") as damaged:
        for entry in original.infolist():  # a readable archive whose pickle is damaged
            data = original.read(entry)
            damaged.writestr(entry, data[:100] + bytes(b ^ 0x55 for b in data[100:140]) + data[140:])
    (tmp_path / "input.txt").write_text("a b c\n")
    options = [f"run={run}", f"input={tmp_path / 'input.txt'}", f"output={tmp_path / 'out.txt'}", "engine=torch"]
    with pytest.raises(UserError) as info:
        translate(compose_config("translate", options))
    message = str(info.value)
    assert message.startswith(f"{best}: not a readable checkpoint (truncated or corrupt): ")
    others = [f"checkpoint={run / 'model'}"]
    others += [f"checkpoint={run / 'ctranslate2'}"] if (run / "ctranslate2").is_dir() else []
    others += [f"checkpoint={run / 'checkpoints' / 'last.pt'}"]
    assert message.endswith(f"; translate with another of the run's models: {', '.join(others)}")
    assert "weights_only" not in message and "\n" not in message
    with_model = [f"checkpoint={run / 'model'}", f"input={tmp_path / 'input.txt'}", f"output={tmp_path / 'out.txt'}"]
    assert translate(compose_config("translate", with_model))["lines"] == 1  # the pointer works


def test_stdin_redirected_from_the_output_file_is_refused(run_dir, tmp_path):
    """`seq2seq-translate output=same.txt < same.txt`, and `>> same.txt` with input=same.txt (stdout)."""
    source = tmp_path / "same.txt"
    source.write_text("a b c\n")
    translate_command = str(Path(sys.executable).parent / "seq2seq-translate")
    with source.open("rb") as stdin:
        done = subprocess.run(
            [translate_command, f"run={run_dir}", f"output={source}"], stdin=stdin, capture_output=True, text=True
        )
    assert (done.returncode, done.stderr) == (
        2,
        f"error: output={source} is the same file as stdin: writing the translations would empty it\n",
    )
    with source.open("ab") as stdout:
        done = subprocess.run(
            [translate_command, f"run={run_dir}", f"input={source}"], stdout=stdout, stderr=subprocess.PIPE, text=True
        )
    assert (done.returncode, done.stderr) == (
        2,
        f"error: stdout is the same file as input={source}: writing the translations would empty it\n",
    )
    assert source.read_text() == "a b c\n"


def test_a_corrupt_gzip_input_is_one_line_naming_it(run_dir, tmp_path):
    packed = bytearray(gzip.compress("".join(f"{i} a b c\n" for i in range(2000)).encode()))
    packed[30] ^= 0xFF
    (tmp_path / "input.txt.gz").write_bytes(bytes(packed))
    cfg = compose_config("translate", [f"run={run_dir}", f"input={tmp_path / 'input.txt.gz'}", "beam=1"])
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'input.txt.gz'))}: cannot read after line"):
        translate(cfg)


def test_characters_never_seen_in_training_are_translated(run_dir, tmp_path):
    lines = ["🙂 猫 ∀x∈ℝ ☃", "a b 😀 c", "中文 한국어 עברית", "\x00\x07 \u200b"]
    result, output = translate_file(run_dir, tmp_path, "\n".join(lines).encode() + b"\n")
    assert result["lines"] == 4 and output.count(b"\n") == 4
    output.decode("utf-8")  # whatever the model says, it is written as valid UTF-8


def test_a_translation_with_line_breaks_stays_on_one_line(run_dir, tmp_path, monkeypatch):
    """The byte-level vocabulary has "\\n" and "\\r" tokens, so a model can output them."""
    monkeypatch.setattr(Tokenizers, "decode_tgt", lambda self, ids: ["x\ny\r\nz\rw" for _ in ids])
    _, output = translate_file(run_dir, tmp_path, b"a b\n\nc d\n")
    assert output == b"x y  z w\n\nx y  z w\n"
    _, output = translate_file(run_dir, tmp_path, b"a b\n", "beam=2", "nbest=2")
    assert [line.split(b" ||| ")[1] for line in output.splitlines()] == [b"x y  z w"] * 2
    # Every character Python's str.splitlines() breaks at, not only "\n" and "\r".
    breaks = "\v\f\x1c\x1d\x1e\x85\u2028\u2029"
    assert len(f"a{breaks}b".splitlines()) == 1 + len(breaks)  # the independent definition
    monkeypatch.setattr(Tokenizers, "decode_tgt", lambda self, ids: [f"a{breaks}b" for _ in ids])
    _, output = translate_file(run_dir, tmp_path, b"a b\nc d\n")
    assert output.decode().splitlines() == ["a" + " " * len(breaks) + "b"] * 2


def test_checkpoint_with_another_runs_tokenizer(run_dir, tmp_path):
    """A checkpoint copied beside the tokenizer.json of a run with another vocabulary size."""
    other = Tokenizers.train(["a b c d e", "f g h"] * 20, ["E D C B A", "H G F"] * 20, "bpe", 270, joint=True)
    other.save(tmp_path)
    checkpoint = tmp_path / "model.pt"
    shutil.copy(run_dir / "checkpoints" / "best.pt", checkpoint)
    ours = load_checkpoint(checkpoint)["vocab"]["src_size"]
    theirs = other.src.get_vocab_size()
    assert ours != theirs
    cfg = compose_config("translate", [f"checkpoint={checkpoint}", f"input={tmp_path / 'x'}"])
    with pytest.raises(UserError) as info:
        translate(cfg)
    assert str(info.value) == (
        f"{checkpoint}: the checkpoint was trained with vocabularies of {ours}/{ours} entries but the "
        f"tokenizer beside it has {theirs}/{theirs}: they belong to different runs"
    )


def test_checkpoint_with_another_tokenizer_of_the_same_size(run_dir, tmp_path):
    """Sizes alone let a checkpoint translate with a tokenizer whose ids mean other tokens."""
    tokenizer = json.loads((run_dir / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]  # BPE: token -> id
    first, second = sorted(vocab, key=vocab.get)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two tokens trade ids: same size, other ids
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    checkpoint = tmp_path / "model.pt"
    shutil.copy(run_dir / "checkpoints" / "best.pt", checkpoint)
    assert Tokenizers.load(tmp_path).src.get_vocab_size() == load_checkpoint(checkpoint)["vocab"]["src_size"]
    shutil.copytree(run_dir / "model", tmp_path / "model")  # the weights-only export, with the other tokenizer
    shutil.copy(tmp_path / "tokenizer.json", tmp_path / "model" / "tokenizer.json")
    (tmp_path / "input.txt").write_text("a b c\n")
    for model, loaded in ((checkpoint, checkpoint), (tmp_path / "model", tmp_path / "model" / "model.safetensors")):
        with pytest.raises(UserError) as info:
            translate(compose_config("translate", [f"checkpoint={model}", f"input={tmp_path / 'input.txt'}"]))
        assert str(info.value) == (
            f"{loaded}: the tokenizer beside it is not the one it was trained with (same size, other tokens): "
            "they belong to different runs"
        )


def test_init_from_a_checkpoint_with_another_vocabulary_is_one_line(run_dir, tmp_path):
    # load_state_dict's size-mismatch traceback.
    payload = load_checkpoint(run_dir / "checkpoints" / "best.pt")
    size = payload["vocab"]["src_size"]
    payload["vocab"] = {**payload["vocab"], "src_size": size + 1, "tgt_size": size + 1}
    payload["model"] = build_model(ModelConfig(**payload["config"]["model"]), size + 1, size + 1, 0).state_dict()
    other = tmp_path / "other.pt"
    torch.save(payload, other)
    cfg = compose_config("train", [*SMALL_RUN, f"data.cache_dir={tmp_path / 'cache'}", f"init_from={other}"])
    with pytest.raises(UserError) as info:
        train(cfg, tmp_path / "run")
    assert str(info.value) == (
        f"init_from={other}: its vocabularies have {size + 1}/{size + 1} entries, this run's tokenizer "
        f"{size}/{size}: its embeddings cannot be used"
    )


def test_beam_larger_than_the_vocabulary(run_dir, tmp_path):
    size = Tokenizers.load(run_dir).tgt.get_vocab_size()
    with pytest.raises(UserError) as info:
        translate_file(run_dir, tmp_path, b"a b\n", f"beam={size + 1}")
    assert str(info.value) == f"beam={size + 1} is larger than the target vocabulary ({size})"


def test_reader_that_goes_away_after_one_line(run_dir, tmp_path):
    """`seq2seq-translate ... | head -n 1`: the reader closes the pipe while translations are still
    coming; the translator stops quietly with status 0."""
    source = tmp_path / "input.txt"
    source.write_text("a b c\n" * 1010)  # more than the first chunk, whether it is one batch or 1000 lines
    command = [
        str(Path(sys.executable).parent / "seq2seq-translate"),
        f"run={run_dir}",
        f"input={source}",
        "beam=1",
        "max_len_a=0",
        "max_len_b=4",  # short outputs: the test is about the pipe, not the model
        "threads=1",  # two threads fighting over two busy cores are 20 times slower
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0, stderr
    assert first.endswith(b"\n")
    assert "Traceback" not in stderr and "Error" not in stderr and "Exception" not in stderr, stderr
    assert "translated 1010 lines" not in stderr  # it did stop early, at the closed pipe


@pytest.mark.parametrize(
    ("redirect", "message"),
    [
        ("<&-", "stdin is closed: give input=<file> or a pipe"),
        (">&-", "stdout is closed: give output=<file> or a pipe"),
    ],
)
def test_a_closed_stdin_or_stdout_is_one_line(run_dir, redirect, message):
    # sys.stdin/sys.stdout are None then: an AttributeError traceback.
    command = f"{Path(sys.executable).parent / 'seq2seq-translate'} run={run_dir} beam=1 threads=1 {redirect}"
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr.splitlines()[-1:]) == (2, [f"error: {message}"]), done.stderr


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_ctrl_c_while_translating_exits_130_without_a_traceback(run_dir, tmp_path, engine):
    """Each engine by name (auto picks by measurement, so the host would decide what this tests). The
    child gets Ctrl-C's default back: a suite started in the background by a shell without job control
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler (the signal was
    lost, exit 0, in such a run)."""
    source = tmp_path / "input.txt"
    source.write_text("a b c d e f g h\n" * 200000)
    command = [str(Path(sys.executable).parent / "seq2seq-translate"), f"run={run_dir}", f"input={source}"]
    options = ["beam=1", "threads=1", f"engine={engine}"]
    process = subprocess.Popen(
        [*command, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stdout.readline().endswith(b"\n")  # translating: the first chunk is out
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=120)[1].decode()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.splitlines()[-1] == "interrupted"


lines_without_newline = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"))


def test_any_unicode_gives_one_output_line_per_input_line(run_dir, tmp_path):
    """Any text without "\\n" (a lone "\\r" inside a line is text; one before the newline is a CRLF
    ending), empty lines included: exactly one output line per input line, empty for empty ones."""
    source, target = tmp_path / "input.txt", tmp_path / "output.txt"
    options = [f"run={run_dir}", f"input={source}", f"output={target}", "beam=1", "max_len_a=0.5", "max_len_b=5"]
    cfg = compose_config("translate", options)  # once: composing costs as much as translating

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.lists(st.one_of(st.just(""), lines_without_newline), max_size=6))
    def check(lines: list[str]) -> None:
        source.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        result = translate(cfg)
        output = target.read_bytes()
        assert result["lines"] == len(lines)
        assert output.count(b"\n") == len(lines) and (output == b"" or output.endswith(b"\n"))
        assert b"\r" not in output
        for number, (line, translation) in enumerate(zip(lines, output.split(b"\n")[:-1], strict=True)):
            text = line.removesuffix("\r")
            text = text.removeprefix("\ufeff") if number == 0 else text
            if not text.strip():
                assert translation == b"", (line, translation)

    check()


def test_output_onto_a_file_translate_did_not_write_is_refused(run_dir, tmp_path):
    # output= emptied any file that was not the model's or the input: the one rule of every writer
    # (seq2seq/artifacts/replacing.py) holds here as in seq2seq-average (issue 62).
    (tmp_path / "input.txt").write_text("a b c\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    args = [f"run={run_dir}", f"input={tmp_path / 'input.txt'}", f"output={notes}"]
    with pytest.raises(UserError) as info:
        translate(compose_config("translate", args))
    assert str(info.value) == (
        f"output={notes}: already exists and is a file seq2seq-translate did not write; give output= a new file, "
        "or add replace_output=true to replace exactly this file"
    )
    assert notes.read_text() == "my notes\n"
    translate(compose_config("translate", [*args, "replace_output=true"]))
    assert notes.read_text().count("\n") == 1 and notes.read_text() != "my notes\n"
    translate(compose_config("translate", args))  # now its own output: written again without the flag
    notes.write_text("edited since\n")
    with pytest.raises(UserError, match="already exists"):
        translate(compose_config("translate", args))


def test_a_killed_translations_file_is_its_own_to_write_again(run_dir, tmp_path, monkeypatch):
    import seq2seq.inference.command as command

    (tmp_path / "input.txt").write_text("a b c\n")
    output = tmp_path / "out.txt"
    args = [f"run={run_dir}", f"input={tmp_path / 'input.txt'}", f"output={output}"]

    def killed(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(command, "_write", killed)
        translate(compose_config("translate", args))
    assert translate(compose_config("translate", args))["lines"] == 1
