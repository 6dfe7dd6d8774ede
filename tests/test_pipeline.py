"""From a data config to tokenized, filtered, cached splits (`seq2seq.data.pipeline`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import random
import re
from pathlib import Path

import datasets
import numpy as np
import pytest

import seq2seq.data.corpora as corpora
import seq2seq.data.pipeline as pipeline
from seq2seq.config import DataConfig, UserError
from seq2seq.data.pipeline import FilterStats, PreparedData, cache_key, prepare_data

MAX_TOKENS = 50


def _words(rng: random.Random, n: int) -> str:
    """n words of 1-2 ASCII letters: at least n tokens (one per pre-token), at most 3n-1 (one per byte)."""
    return " ".join("".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 2))) for _ in range(n))


def make_pairs() -> tuple[list[tuple[str, str]], dict[str, int], list[tuple[str, str]]]:
    """Training pairs with the drop reason of each known by construction, not by running the filter."""
    rng = random.Random(7)
    pairs: list[tuple[str, str, str | None]] = []
    for _ in range(40):  # kept: same words on both sides (upper-cased), so within 3x, and <= 29 bytes < 50
        src = _words(rng, rng.randint(2, 10))
        pairs.append((src, src.upper(), None))
    pairs += [("", "x y", "dropped_empty")] * 3
    pairs += [("a b", "", "dropped_empty")] * 2
    pairs += [("", "", "dropped_empty")]
    pairs += [(" ".join(["a"] * 80), "", "dropped_empty")]  # empty is checked before length
    # whitespace alone is empty too: a byte-level tokenizer makes a token of it, a "length ratio" drop before
    pairs += [("a b c d", " ", "dropped_empty"), ("\u3000 ", "x y", "dropped_empty"), ("a b", "\t", "dropped_empty")]
    for _ in range(4):  # >= 60 pre-tokens, so > 50 tokens, on the source side; ratio irrelevant
        pairs.append((_words(rng, 60), _words(rng, 5), "dropped_too_long"))
    pairs.append((_words(rng, 3), " ".join(["b"] * 51), "dropped_too_long"))
    for _ in range(3):  # one byte, one token vs >= 10 tokens, <= 29 bytes: ratio >= 10
        pairs.append(("a", _words(rng, 10), "dropped_length_ratio"))
    pairs.append((_words(rng, 12), "Z", "dropped_length_ratio"))
    rng.shuffle(pairs)
    counts = {"dropped_empty": 0, "dropped_too_long": 0, "dropped_length_ratio": 0}
    for *_, reason in pairs:
        if reason:
            counts[reason] += 1
    kept = [(s, t) for s, t, reason in pairs if reason is None]
    return [(s, t) for s, t, _ in pairs], counts, kept


VALID = [("a b c", "C B A"), ("", "empty source"), ("Grüße 🙂", "GRÜSSE 🙂")]


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def cfg(tmp_path) -> DataConfig:
    pairs, _, _ = make_pairs()
    files = tmp_path / "data"
    files.mkdir()
    return DataConfig(
        kind="parallel_files",
        train_src=write_lines(files / "train.src", [s for s, _ in pairs]),
        train_tgt=write_lines(files / "train.tgt", [t for _, t in pairs]),
        valid_src=write_lines(files / "valid.src", [s for s, _ in VALID]),
        valid_tgt=write_lines(files / "valid.tgt", [t for _, t in VALID]),
        vocab_size=300,
        max_tokens=MAX_TOKENS,
        max_length_ratio=3.0,
        cache_dir=str(tmp_path / "cache"),
    )


def decoded(data: PreparedData, split: str, side: str) -> list[str]:
    column = getattr(getattr(data, split), side)
    tokenizer = data.tokenizers.src if side == "src" else data.tokenizers.tgt
    return [tokenizer.decode(column[i].tolist(), skip_special_tokens=True) for i in range(len(column))]


def cache_entries(cfg: DataConfig) -> list[str]:
    return sorted(p.name for p in Path(cfg.cache_dir).iterdir())


def test_prepare_data_tokenizes_and_filters(cfg):
    pairs, counts, kept = make_pairs()
    assert all(counts.values()) and len(kept) == 40
    data = prepare_data(cfg)
    assert data.stats == FilterStats(train_pairs=len(pairs), **counts, train_kept=len(kept))
    # The file keeps the layout of caches written before the stats were a dataclass: those still load.
    saved = json.loads((Path(cfg.cache_dir) / cache_key(cfg) / "stats.json").read_text())
    assert saved == {"train_pairs": len(pairs), **counts, "train_kept": len(kept)}
    assert len(data.train) == len(kept)
    assert decoded(data, "train", "src") == [s for s, _ in kept]
    assert decoded(data, "train", "tgt") == [t for _, t in kept]
    # Validation is never filtered and keeps its text for BLEU.
    assert len(data.valid) == len(VALID)
    assert data.valid.src_text == [s for s, _ in VALID] and data.valid.tgt_text == [t for _, t in VALID]
    assert decoded(data, "valid", "src") == [s for s, _ in VALID]
    assert decoded(data, "valid", "tgt") == [t for _, t in VALID]
    # Token columns: flat int32 ids with offsets, agreeing with the tokenizer.
    lengths = data.train.src.lengths()
    assert lengths.tolist() == [len(data.tokenizers.encode_src([s])[0]) for s, _ in kept]
    assert 0 < lengths.min() and lengths.max() <= MAX_TOKENS
    assert all(values.dtype.name == "int32" for values in data.train.src.values)
    assert data.tokenizers.joint and cache_entries(cfg) == [cache_key(cfg)]


def test_preparing_data_never_needs_datasets_to_pickle_a_table(cfg, monkeypatch):
    """On an H100 machine (Python 3.12, pyarrow 26, dill 0.4.1) `datasets.Dataset.from_dict` failed:
    it names every new dataset by pickling its table with dill, which raised PicklingError on pyarrow's
    MonthDayNano, and no data could be prepared. Our caches are our own files, so nothing needs that
    name: here the pickling fails as it did there, and the data must still be prepared, text intact."""
    import pyarrow as pa
    from datasets.utils._dill import Pickler

    def fails_as_on_that_machine(pickler, table):
        raise pickle.PicklingError("Can't pickle <class 'MonthDayNano'>: it's not found as builtins.MonthDayNano")

    monkeypatch.setitem(Pickler.dispatch, pa.Table, fails_as_on_that_machine)
    _, _, kept = make_pairs()
    data = prepare_data(cfg)
    assert decoded(data, "train", "tgt") == [t for _, t in kept]
    assert data.valid.src_text == [s for s, _ in VALID] and data.valid.tgt_text == [t for _, t in VALID]
    assert decoded(data, "valid", "tgt") == [t for _, t in VALID]


def test_a_megabyte_line_without_spaces_is_dropped_before_tokenization(cfg, monkeypatch):
    # It used to reach the tokenizer trainer, which ran for minutes on it without a word.
    pairs, counts, kept = make_pairs()
    huge = "x" * 1_000_000
    write_lines(Path(cfg.train_src), [s for s, _ in pairs] + [huge, "a b"])
    write_lines(Path(cfg.train_tgt), [t for _, t in pairs] + ["X", huge[:900_000]])
    train_tokenizer = pipeline.Tokenizers.train

    def checked(src, tgt, *args, **kwargs):
        def short(texts):
            for text in texts:
                assert len(text) < 100_000, "an over-long line reached BPE"
                yield text

        return train_tokenizer(short(src), short(tgt), *args, **kwargs)

    monkeypatch.setattr(pipeline.Tokenizers, "train", checked)
    data = prepare_data(cfg)
    too_long = counts["dropped_too_long"] + 2
    assert data.stats == FilterStats(
        train_pairs=len(pairs) + 2, **{**counts, "dropped_too_long": too_long}, train_kept=len(kept)
    )
    assert decoded(data, "train", "src") == [s for s, _ in kept]


def test_second_call_uses_the_cache(cfg, monkeypatch):
    first = prepare_data(cfg)

    def fail(*args: object) -> None:
        raise AssertionError("rebuilt instead of loading the cache")

    monkeypatch.setattr(pipeline, "iter_split", fail)
    monkeypatch.setattr(pipeline.Tokenizers, "train", fail)
    second = prepare_data(cfg)
    assert second.stats == first.stats
    assert decoded(second, "train", "src") == decoded(first, "train", "src")
    assert (np.concatenate(second.train.tgt.values) == np.concatenate(first.train.tgt.values)).all()
    assert second.valid.tgt_text == first.valid.tgt_text
    assert cache_entries(cfg) == [cache_key(cfg)]


def count_reads(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = pipeline.iter_split

    def counting(cfg: DataConfig, split: str) -> object:
        calls.append(split == "train")
        return real(cfg, split)

    monkeypatch.setattr(pipeline, "iter_split", counting)  # valid and test
    monkeypatch.setattr(corpora, "iter_split", counting)  # the training streams
    return calls


def test_touching_a_corpus_file_keeps_the_cache(cfg, monkeypatch):
    # The key is the content: a new modification time alone (touch, a fresh checkout) reads nothing again.
    prepare_data(cfg)
    old_key = cache_key(cfg)
    stat = os.stat(cfg.valid_tgt)
    os.utime(cfg.valid_tgt, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert cache_key(cfg) == old_key
    calls = count_reads(monkeypatch)
    prepare_data(cfg)
    assert sum(calls) == 0 and cache_entries(cfg) == [old_key]


def test_a_same_size_edit_with_its_time_restored_rebuilds_with_the_new_text(cfg, monkeypatch):
    # `cp -p`, `rsync -t` or `tar` keep size and modification time: the cache keyed on them trained on the old text.
    first = prepare_data(cfg)
    old_key = cache_key(cfg)
    path = Path(cfg.valid_src)
    stat = os.stat(path)
    text = path.read_bytes()
    edited = text.replace(b"a b c", b"x y z", 1)
    assert edited != text and len(edited) == len(text)
    path.write_bytes(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    calls = count_reads(monkeypatch)
    second = prepare_data(cfg)
    assert sum(calls) == 1 and cache_key(cfg) != old_key
    assert first.valid.src_text[0] == "a b c" and second.valid.src_text[0] == "x y z"


def test_editing_a_corpus_file_rebuilds_with_the_new_text(cfg, monkeypatch):
    first = prepare_data(cfg)
    old_key = cache_key(cfg)
    edited = ["edited line", *(s for s, _ in VALID[1:])]
    write_lines(Path(cfg.valid_src), edited)
    calls = count_reads(monkeypatch)
    second = prepare_data(cfg)
    assert sum(calls) == 1 and cache_key(cfg) != old_key
    assert first.valid.src_text[0] == "a b c" and second.valid.src_text == edited


def test_cache_key_follows_settings_not_cache_dir(cfg, tmp_path):
    key = cache_key(cfg)
    assert cache_key(dataclasses.replace(cfg, cache_dir=str(tmp_path / "elsewhere"))) == key
    assert cache_key(dataclasses.replace(cfg, vocab_size=301)) != key
    assert cache_key(dataclasses.replace(cfg, max_length_ratio=2.0)) != key
    assert cache_key(dataclasses.replace(cfg, tokenizer="unigram")) != key
    # The buffer size only changes how a streamed corpus is read, not what is cached.
    assert cache_key(dataclasses.replace(cfg, stream_buffer_pairs=7)) == key
    assert re.fullmatch(r"[0-9a-f]{16}", key)  # a directory name on any file system


def test_failed_tokenizer_training_leaves_no_cache(cfg, monkeypatch):
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("tokenizer training failed")

    monkeypatch.setattr(pipeline.Tokenizers, "train", broken)
    with pytest.raises(RuntimeError, match="tokenizer training failed"):
        prepare_data(cfg)
    assert cache_entries(cfg) == []
    monkeypatch.undo()
    assert len(prepare_data(cfg).train) == 40


def test_failure_while_writing_leaves_no_partial_dir(cfg, monkeypatch):
    real_save = datasets.Dataset.save_to_disk
    saves: list[str] = []

    def save_then_fail(self: datasets.Dataset, path: str, **kwargs: object) -> None:
        saves.append(path)
        if len(saves) == 2:  # train written, valid fails: the staging directory is half full
            raise OSError("disk full")
        real_save(self, path, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "save_to_disk", save_then_fail)
    with pytest.raises(UserError, match=r"cannot write the tokenized data there \(disk full\)"):
        prepare_data(cfg)
    assert len(saves) == 2
    assert cache_entries(cfg) == []
    monkeypatch.undo()
    assert len(prepare_data(cfg).train) == 40
    assert cache_entries(cfg) == [cache_key(cfg)]


def test_nothing_survives_filtering(cfg):
    tight = dataclasses.replace(cfg, max_tokens=1)
    with pytest.raises(
        UserError, match=r"^no training pair survives filtering \(data\.max_tokens=1, data\.max_length_ratio=3\.0\)$"
    ):
        prepare_data(tight)
    assert cache_entries(tight) == []


def test_separate_vocabularies(cfg):
    data = prepare_data(dataclasses.replace(cfg, joint_vocab=False, tokenizer="unigram"))
    assert not data.tokenizers.joint
    _, _, kept = make_pairs()
    assert decoded(data, "train", "src") == [s for s, _ in kept]
    assert decoded(data, "train", "tgt") == [t for _, t in kept]


@pytest.mark.parametrize(
    ("src_len", "tgt_len", "reason"),
    [
        (0, 5, "dropped_empty"),
        (5, 0, "dropped_empty"),
        (0, 99, "dropped_empty"),  # empty wins over too long
        (50, 50, None),  # max_tokens itself is allowed
        (51, 20, "dropped_too_long"),
        (20, 51, "dropped_too_long"),
        (51, 1, "dropped_too_long"),  # too long wins over the ratio
        (30, 10, None),  # a ratio of exactly 3 is allowed
        (10, 30, None),
        (31, 10, "dropped_length_ratio"),
        (1, 4, "dropped_length_ratio"),
    ],
)
def test_keep_pair_rules(src_len, tgt_len, reason):
    assert pipeline.keep_pair(src_len, tgt_len, 50, 3.0) == reason


@pytest.mark.parametrize(
    "damage",
    [
        lambda target: _truncate(next((target / "train").glob("*.arrow"))),
        lambda target: (target / "stats.json").write_text("garbage"),
        lambda target: (target / "stats.json").write_text("{}"),
    ],
    ids=["truncated-arrow", "garbage-stats", "empty-stats"],
)
def test_a_damaged_cache_is_built_again_and_says_so(cfg, caplog, damage):
    # A truncated Arrow file or a garbage stats.json was a traceback on every later run.
    first = prepare_data(cfg)
    stats, sources = first.stats, decoded(first, "train", "src")  # before the damage: it is memory-mapped
    target = Path(cfg.cache_dir) / cache_key(cfg)
    damage(target)
    with caplog.at_level(logging.WARNING, logger="seq2seq.data.pipeline"):
        second = prepare_data(cfg)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"the cached data in {target} is damaged (")
    assert warning.endswith("): tokenizing the corpus again")
    assert second.stats == stats and decoded(second, "train", "src") == sources
    assert cache_entries(cfg) == [cache_key(cfg)]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_cache_directory_that_cannot_be_written_is_one_line(cfg, tmp_path):
    # A read-only (or otherwise unusable) SEQ2SEQ_CACHE was a traceback from mkdir.
    (tmp_path / "file").write_text("")
    unusable = dataclasses.replace(cfg, cache_dir=str(tmp_path / "file" / "cache"))
    with pytest.raises(UserError) as info:
        prepare_data(unusable)
    assert str(info.value) == (
        f"{tmp_path / 'file' / 'cache'}: cannot write the tokenized data there (Not a directory); "
        "set data.cache_dir or SEQ2SEQ_CACHE to a writable directory"
    )


@pytest.mark.parametrize("named", [False, True])
def test_the_cache_line_names_its_folder_and_the_setting_that_moves_it(cfg, tmp_path, monkeypatch, caplog, named):
    """Regression: the tokenized data went to ~/.cache/seq2seq, a folder the user never named, and the
    line said where but not how to put it elsewhere."""
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "machine cache"))
    cfg = dataclasses.replace(cfg, cache_dir=str(tmp_path / "mine") if named else None)
    with caplog.at_level(logging.INFO, logger="seq2seq.data.pipeline"):
        prepare_data(cfg)
    root = tmp_path / ("mine" if named else "machine cache")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenizing the corpus")]
    setting = "data.cache_dir" if named else "data.cache_dir or SEQ2SEQ_CACHE"
    assert (
        line == f"tokenizing the corpus (cached in {root / cache_key(cfg)} for the next run; {setting} sets the folder)"
    )
    assert (root / cache_key(cfg)).is_dir()


def test_a_measurement_says_where_it_is_kept(tmp_path, monkeypatch, caplog):
    import dataclasses as dc

    from seq2seq import measurement_cache

    @dc.dataclass
    class Pace:
        seconds: float

    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="seq2seq.measurement_cache"):
        assert measurement_cache.cached("pace.json", "here", Pace, lambda: Pace(1.0)) == Pace(1.0)
        assert measurement_cache.cached("pace.json", "here", Pace, lambda: Pace(2.0)) == Pace(1.0)  # read back
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"measured here once for this machine: kept in {tmp_path / 'cache' / 'pace.json'} (SEQ2SEQ_CACHE sets the folder)"
    ]
