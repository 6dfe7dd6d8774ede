"""data.tokenizer=sentencepiece: SentencePiece models trained on the training split, written as
OPUS-MT ships them, cached like the byte-level tokenizer, and a run that trains, resumes and decodes
with both engines on them."""

from __future__ import annotations

import gzip
import json
from itertools import islice
from pathlib import Path

import pytest
import torch
from conftest import MULTI30K, SENTENCEPIECE_LINES, SENTENCEPIECE_TRAIN, TINY_TRAIN, compose_config

import seq2seq.data.pipeline as pipeline
from seq2seq.cli.train import train
from seq2seq.config import DataConfig, UserError
from seq2seq.data.builtin import reverse_task
from seq2seq.data.sentencepiece import SentencePieceTokenizers
from seq2seq.data.sentencepiece_training import train_sentencepiece
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.ctranslate2_engine import CTranslate2Translator
from seq2seq.inference.translator import Translator

sentencepiece = pytest.importorskip("sentencepiece")
model_pb2 = pytest.importorskip("sentencepiece.sentencepiece_model_pb2")


def corpus() -> tuple[list[str], list[str]]:
    pairs = reverse_task(DataConfig(task_train_size=300))["train"]
    src, tgt = list(pairs[0]), list(pairs[1])
    if MULTI30K is not None:
        for lang, side in (("en", src), ("de", tgt)):
            with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
                side += [line.strip() for line in islice(handle, 500)]
    return src, tgt


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    directory = tmp_path_factory.mktemp("spm")
    train_sentencepiece(*corpus(), request.param, 600, True, directory)
    return request.param, directory


def test_files_are_numbered_as_opus_mt_numbers_them(trained: tuple[str, Path]) -> None:
    """</s> 0, <unk> 1, then the SentencePiece model's pieces in its order, <pad> last (what
    CTranslate2's Marian converter drops); the model type is the sub-key's."""
    kind, directory = trained
    model = (directory / "source.spm").read_bytes()
    assert model == (directory / "target.spm").read_bytes()  # joint: one model for both sides
    assert not (directory / "target_vocab.json").exists()
    proto = model_pb2.ModelProto()
    proto.ParseFromString(model)
    assert proto.trainer_spec.model_type == {"unigram": 1, "bpe": 2}[kind]
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == {piece: i for i, piece in enumerate([*pieces, "<pad>"])}
    assert pieces[:2] == ["</s>", "<unk>"] and "<s>" not in vocab
    assert len(vocab) <= 600


def test_ids_are_the_pieces_of_the_sentencepiece_model(trained: tuple[str, Path]) -> None:
    """Our ids are the file's, moved into this project's layout (pad 0, EOS 2, UNK 3; the file's
    first ordinary piece, id 2, in slot 1; file id k > 2 -> k + 1)."""
    _, directory = trained
    tokenizers = Tokenizers.load(directory)
    assert isinstance(tokenizers, SentencePieceTokenizers)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    ours = {0: 2, 1: 3, 2: 1, vocab["<pad>"]: 0}
    lines = ["A man rides a bike.", "a b c d", "Zwei Männer schlafen."]
    for line, ids in zip(lines, tokenizers.encode_src(lines), strict=True):
        expected = [vocab[p] for p in processor.encode(line, out_type=str)]
        assert ids == [ours.get(i, i + 1) for i in expected]


def test_unseen_characters_come_back_as_themselves(trained: tuple[str, Path]) -> None:
    """Byte fallback: characters the corpus never had become byte pieces, never <unk>."""
    _, directory = trained
    tokenizers = Tokenizers.load(directory)
    line = "Zoë sees ☃ and 🙂 at 3 o'clock"
    ids = tokenizers.encode_tgt([line])[0]
    assert 3 not in ids  # UNK
    assert tokenizers.decode_tgt([ids]) == [line]


def test_separate_vocabularies(tmp_path: Path) -> None:
    src, tgt = corpus()
    tokenizers = train_sentencepiece(src, tgt, "unigram", 400, False, tmp_path)
    assert not tokenizers.joint and (tmp_path / "target_vocab.json").is_file()
    assert (tmp_path / "source.spm").read_bytes() != (tmp_path / "target.spm").read_bytes()
    assert Tokenizers.load(tmp_path).fingerprint() == tokenizers.fingerprint()


def test_the_cache_holds_the_tokenizer_and_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = DataConfig(tokenizer="sentencepiece", task_train_size=300, task_valid_size=10, cache_dir=str(tmp_path))
    first = pipeline.prepare_data(cfg)
    assert (tmp_path / pipeline.cache_key(cfg) / "source.spm").is_file()

    def no_training(*args: object) -> None:
        raise AssertionError("trained again instead of reading the cache")

    monkeypatch.setattr(pipeline, "train_sentencepiece", no_training)
    again = pipeline.prepare_data(cfg)
    assert again.tokenizers.fingerprint() == first.tokenizers.fingerprint()
    assert [list(again.valid.src[i]) for i in range(10)] == [list(first.valid.src[i]) for i in range(10)]
    other = DataConfig(**{**cfg.__dict__, "sentencepiece_type": "bpe"})
    assert pipeline.cache_key(other) != pipeline.cache_key(cfg)


def test_a_byte_level_cache_keeps_its_key() -> None:
    """The sub-key exists for SentencePiece alone: a byte-level run's cache is not rebuilt for it."""
    assert pipeline.cache_key(DataConfig(sentencepiece_type="bpe")) == pipeline.cache_key(DataConfig())


def test_a_bos_start_is_refused_in_one_line(tmp_path: Path) -> None:
    overrides = [*TINY_TRAIN, "data.tokenizer=sentencepiece", "model.decoder_start=bos"]
    with pytest.raises(UserError, match=r"^model\.decoder_start: data\.tokenizer=sentencepiece has no <s>"):
        train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)


def test_the_run_starts_from_pad_and_keeps_its_tokenizer_files(sentencepiece_run: Path) -> None:
    saved = torch.load(sentencepiece_run / "checkpoints" / "last.pt", weights_only=True)
    assert saved["config"]["model"]["decoder_start"] == "pad"
    assert saved["config"]["data"]["tokenizer"] == "sentencepiece"
    tokenizers = Tokenizers.load(sentencepiece_run)
    assert isinstance(tokenizers, SentencePieceTokenizers)
    assert saved["vocab"]["tokenizer"] == tokenizers.fingerprint()


@pytest.mark.parametrize("beam", [1, 5])
def test_both_engines_write_the_same_lines(sentencepiece_run: Path, beam: int) -> None:
    """The run's own CTranslate2 export (written at the end of training) decodes as PyTorch does."""
    assert (sentencepiece_run / "ctranslate2" / "model.bin").is_file()
    settings = dict(beam=beam, precision="fp32", device="cpu")
    ours = Translator.load(sentencepiece_run, **settings).translate(SENTENCEPIECE_LINES)
    theirs = CTranslate2Translator.load(sentencepiece_run, **settings).translate(SENTENCEPIECE_LINES)
    assert ours == theirs
    assert sum(line != "" for line in ours) >= len(ours) // 2  # a model that writes something


def test_a_copied_checkpoint_without_its_tokenizer_names_the_files_it_needs(
    sentencepiece_run: Path, tmp_path: Path
) -> None:
    # It said "no tokenizer.json beside it", a file this model never had.
    import shutil

    copy = tmp_path / "elsewhere" / "model.pt"
    copy.parent.mkdir()
    shutil.copyfile(sentencepiece_run / "checkpoints" / "best.pt", copy)
    with pytest.raises(UserError) as info:
        Translator.load(copy, precision="fp32", device="cpu")
    assert str(info.value) == (
        f"{copy}: its tokenizer is not beside it or in its run directory: source.spm, target.spm and vocab.json "
        "(data.tokenizer=sentencepiece); copy them from the run that trained it"
    )
    for name in ("source.spm", "target.spm", "vocab.json"):  # the files named are the files it needs
        shutil.copyfile(sentencepiece_run / name, copy.parent / name)
    settings = dict(beam=1, precision="fp32", device="cpu")
    expected = Translator.load(sentencepiece_run, **settings).translate(SENTENCEPIECE_LINES[:4])
    assert Translator.load(copy, **settings).translate(SENTENCEPIECE_LINES[:4]) == expected


def test_resume_reads_the_runs_tokenizer(sentencepiece_run: Path, tmp_path: Path) -> None:
    """A resumed run tokenizes with the files in its directory, not with a tokenizer trained again."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sentencepiece_run, run)
    before = Tokenizers.load(run).fingerprint()
    overrides = [f"resume={run}", "max_steps=124", f"data.cache_dir={tmp_path / 'cache'}"]
    cfg = compose_config("train", [*SENTENCEPIECE_TRAIN, *overrides])
    summary = train(cfg, run, overrides=overrides)
    assert summary["step"] == 124
    assert Tokenizers.load(run).fingerprint() == before
    assert next((tmp_path / "cache").iterdir()).joinpath("source.spm").read_bytes() == (run / "source.spm").read_bytes()


def test_a_vocabulary_too_small_for_the_characters_is_one_line(tmp_path: Path) -> None:
    """Byte fallback needs the 256 bytes and every frequent character: SentencePiece says so, in one line."""
    lines = ["abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 äöüß"] * 20
    with pytest.raises(UserError, match=r"^data\.tokenizer=sentencepiece, data\.vocab_size=262: .*vocab_size") as error:
        train_sentencepiece(lines, lines, "unigram", 262, True, tmp_path)
    assert "\n" not in str(error.value)


# ---- what normalisation does to text, as docs/train.md states it (issue 62.10) -----------------------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "train.md"
NORMALISATION_MARKER = "<!-- sentencepiece-normalisation: input | output -->"
# nmt_nfkc's differences from NFKC, as docs/train.md lists them (code point ranges, inclusive).
DROPPED = [(0x01, 0x08), (0x0B, 0x0B), (0x0E, 0x1F), (0x7F, 0x7F), (0x8F, 0x8F), (0x9F, 0x9F)]
TO_SPACE = [
    (0x09, 0x0A), (0x0C, 0x0D), (0x061C, 0x061C), (0x1680, 0x1680), (0x200B, 0x200C), (0x200E, 0x200F),
    (0x2028, 0x2029), (0x2581, 0x2581), (0xFEFF, 0xFEFF), (0xFFFD, 0xFFFD),
]  # fmt: skip
KEPT = [(0xFF5E, 0xFF5E)]


def documented_examples() -> list[tuple[str, str]]:
    """The (text, what the model reads and writes) rows of docs/train.md's table, escapes decoded."""
    lines = DOCS.read_text(encoding="utf-8").split(NORMALISATION_MARKER, 1)[1].strip().splitlines()
    rows = []
    for line in lines[2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        text, output = (cell.strip().strip("`") for cell in line.strip("|").split("|")[:2])
        rows.append(
            tuple(value.encode("ascii", "backslashreplace").decode("unicode_escape") for value in (text, output))
        )
    return rows


def test_the_documented_examples_read_and_write_as_the_docs_say(trained: tuple[str, Path]) -> None:
    """Regression (62.10): docs/train.md said byte fallback brings any character back as itself, and
    SentencePiece normalised tab, zero-width space, BOM, NFKC forms and double spaces away."""
    _, directory = trained
    tokenizers = Tokenizers.load(directory)
    examples = documented_examples()
    assert len(examples) >= 8
    for text, expected in examples:
        ids = tokenizers.encode_tgt([text])[0]
        assert 3 not in ids, text  # UNK
        assert tokenizers.decode_tgt([ids]) == [expected], text


def _in(ranges: list[tuple[int, int]], code: int) -> bool:
    return any(low <= code <= high for low, high in ranges)


def test_the_documented_rule_is_all_that_normalisation_does(trained: tuple[str, Path]) -> None:
    """Every assigned character of the Basic Multilingual Plane (in Python's Unicode version; the
    sentencepiece library's may be newer) between two letters, normalised by the trained model, equals
    the rule docs/train.md states: NFKC, but the listed characters dropped, made a space or kept, then
    runs of spaces made one, up to canonical equivalence. And the docs name each listed range."""
    import re
    import unicodedata

    _, directory = trained
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / "source.spm"))
    wrong = []
    for code in range(1, 0x10000):
        char = chr(code)
        if unicodedata.category(char) in ("Cn", "Cs"):
            continue
        mapped = "" if _in(DROPPED, code) else " " if _in(TO_SPACE, code) else char
        expected = f"a{char}b" if _in(KEPT, code) else re.sub(" +", " ", unicodedata.normalize("NFKC", f"a{mapped}b"))
        got = processor.normalize(f"a{char}b").replace("\u2581", " ").removeprefix(" ")  # its dummy prefix
        if unicodedata.normalize("NFC", got) != expected:  # U+0344 after a letter stays decomposed
            wrong.append(f"U+{code:04X}: {got!r} != {expected!r}")
    assert wrong == []
    prose = " ".join(DOCS.read_text(encoding="utf-8").split())
    for low, high in [*DROPPED, *TO_SPACE, *KEPT]:
        if low == high:
            assert f"U+{low:04X}" in prose or low < 0x20, low
    assert "U+0001–U+0008" in prose and "U+000E–U+001F" in prose


def test_training_says_how_it_normalises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src, tgt = corpus()
    with caplog.at_level("INFO", "seq2seq.data.sentencepiece_training"):
        train_sentencepiece(src[:200], tgt[:200], "unigram", 400, True, tmp_path)
    assert [r.getMessage() for r in caplog.records if "nmt_nfkc" in r.getMessage()] != []
    proto = model_pb2.ModelProto()
    proto.ParseFromString((tmp_path / "source.spm").read_bytes())
    assert proto.normalizer_spec.name == "nmt_nfkc" and proto.normalizer_spec.remove_extra_whitespaces
