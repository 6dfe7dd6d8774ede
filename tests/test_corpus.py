"""Reading parallel text (`seq2seq.data.corpus`) and the built-in task (`seq2seq.data.builtin`):
exact line handling, and errors that name the file and line."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import MULTI30K, MULTI30K_MISSING

from seq2seq.config import DataConfig, UserError
from seq2seq.data.builtin import reverse_task
from seq2seq.data.corpus import (
    Pairs,
    corpus_sources,
    iter_jsonl,
    iter_parallel,
    iter_split,
    iter_tsv,
    read_lines,
    require_pairs,
    unzip,
)


def read_splits(cfg: DataConfig) -> dict[str, Pairs]:
    """Every split the config names, read whole through `iter_split`, as the pipeline reads them."""
    splits = {split: iter_split(cfg, split) for split in ("train", "valid", "test")}
    return {split: unzip(pairs) for split, pairs in splits.items() if pairs is not None}


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# --- read_lines ---------------------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.txt"
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: no such file$"):
        read_lines(path)


def test_directory_is_refused(tmp_path):
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path))}: is a directory"):
        read_lines(tmp_path)


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt", b"one\ntwo\nthr\xffee\nfour\n")
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:3: invalid UTF-8 at byte 3 of the line$"):
        read_lines(path)


def test_invalid_utf8_in_gzip_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt.gz", gzip.compress(b"ok\n\xc3\n"))
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:2: invalid UTF-8"):
        read_lines(path)


def test_bom_is_stripped_from_the_first_line_only(tmp_path):
    path = write(tmp_path / "bom.txt", "\ufeffhello\n\ufeffworld\n")
    assert read_lines(path) == ["hello", "\ufeffworld"]


def test_crlf_endings_are_stripped(tmp_path):
    path = write(tmp_path / "crlf.txt", b"a b\r\nc\r\n\r\nd\r\n")
    assert read_lines(path) == ["a b", "c", "", "d"]


def test_a_lone_cr_inside_a_line_is_kept(tmp_path):
    path = write(tmp_path / "cr.txt", b"a\rb\nc\n")
    assert read_lines(path) == ["a\rb", "c"]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"])
def test_only_newline_splits_lines(tmp_path, separator):
    lines = [f"left{separator}right", "second", f"{separator}third{separator}"]
    assert len(f"x{separator}y".splitlines()) == 2  # what str.splitlines would do
    path = write(tmp_path / "sep.txt", "\n".join(lines) + "\n")
    assert read_lines(path) == lines


def test_gzip_reads_like_plain(tmp_path):
    text = "één\n二\n\nlast line 🙂\n"
    plain = write(tmp_path / "x.txt", text)
    packed = write(tmp_path / "x.txt.gz", gzip.compress(text.encode("utf-8")))
    assert read_lines(packed) == read_lines(plain) == ["één", "二", "", "last line 🙂"]


def test_a_truncated_gzip_file_is_a_user_error(tmp_path):
    path = write(tmp_path / "cut.gz", gzip.compress(b"a\n" * 1000)[:20])
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: cannot read"):
        read_lines(path)


def test_a_corrupt_gzip_file_is_a_user_error(tmp_path):
    # A flipped byte in the deflate stream: zlib.error ("invalid bit length repeat"), not an OSError.
    packed = bytearray(gzip.compress("".join(f"{i} the quick brown fox\n" for i in range(2000)).encode()))
    packed[30] ^= 0xFF
    path = write(tmp_path / "corrupt.gz", bytes(packed))
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: cannot read after line 0: Error -3"):
        read_lines(path)


def test_trailing_newline_does_not_change_the_count(tmp_path):
    with_newline = write(tmp_path / "a.txt", "x\ny\nz\n")
    without = write(tmp_path / "b.txt", "x\ny\nz")
    assert read_lines(with_newline) == read_lines(without) == ["x", "y", "z"]
    # An empty last line is a line: only the one final newline is a terminator.
    assert read_lines(write(tmp_path / "c.txt", "x\n\n")) == ["x", ""]
    assert read_lines(write(tmp_path / "d.txt", "")) == []


def test_a_very_long_line_is_read_intact(tmp_path):
    long_line = "".join(chr(0x61 + i % 26) for i in range(100_000))
    path = write(tmp_path / "long.txt", f"short\n{long_line}\nend\n")
    lines = read_lines(path)
    assert len(lines) == 3 and lines[1] == long_line and len(lines[1]) == 100_000


@pytest.mark.parametrize("name", ["plain.txt", "packed.txt.gz"])
def test_a_reader_left_unfinished_closes_in_a_torn_down_module(tmp_path, monkeypatch, name):
    """Regression: a streamed run stopping mid-epoch printed "Exception ignored in: <generator object
    iter_lines>" at exit. The unfinished reader is closed while the interpreter tears modules down (their
    names set to None), and closing it looked up zlib.error in an except clause around its yield."""
    import seq2seq.data.corpus as corpus

    text = "".join(f"line {i}\n" for i in range(10))
    path = write(tmp_path / name, gzip.compress(text.encode()) if name.endswith(".gz") else text)
    lines = corpus.iter_lines(path)
    assert next(lines) == "line 0"
    for global_name in [n for n in vars(corpus) if not n.startswith("__")]:  # as the interpreter's end does
        monkeypatch.setattr(corpus, global_name, None)
    lines.close()  # raised AttributeError: 'NoneType' object has no attribute 'error'


# --- parallel, TSV, JSONL -----------------------------------------------------------------------


def test_iter_parallel_pairs_lines(tmp_path):
    src = write(tmp_path / "a.src", "a\nb\n")
    tgt = write(tmp_path / "a.tgt", "A\nB")
    assert unzip(iter_parallel(src, tgt)) == (["a", "b"], ["A", "B"])


def test_iter_parallel_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "a.src", "1\n2\n3\n")
    tgt = write(tmp_path / "a.tgt", "1\n2\n")
    with pytest.raises(UserError) as info:
        list(iter_parallel(src, tgt))
    assert str(info.value) == f"{src} has 3 lines but {tgt} has 2: they must pair up"


def test_iter_tsv(tmp_path):
    path = write(tmp_path / "x.tsv", "a b\tA B\nc\td e\n\t\n")
    assert unzip(iter_tsv(path)) == (["a b", "c", ""], ["A B", "d e", ""])


@pytest.mark.parametrize(("line", "columns"), [("c\td\tEXTRA", 3), ("c\td\t", 3), ("c\t\t\td", 4)])
def test_iter_tsv_refuses_a_third_column_naming_file_and_line(tmp_path, line, columns):
    """A third column (an id, a score) would otherwise be trained into the target: 62.11."""
    path = write(tmp_path / "train.tsv", f"a\tA\nb\tB\n{line}\nd\tD\n")
    message = f"{path}:3: {columns} tab-separated columns; data=tsv takes 2 (source, target)"
    with pytest.raises(UserError, match=rf"^{re.escape(message)}$"):
        list(iter_tsv(path))


def test_iter_tsv_line_without_tab_names_file_and_line(tmp_path):
    path = write(tmp_path / "x.tsv", "a\tA\nb\tB\nno tab here\n")
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:3: expected 'source<TAB>target', found no tab$"):
        list(iter_tsv(path))


def test_iter_jsonl(tmp_path):
    rows = [{"en": "a", "de": "A", "id": 1}, {"en": "b\nc", "de": "B"}]
    path = write(tmp_path / "x.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert unzip(iter_jsonl(path, "en", "de")) == (["a", "b\nc"], ["A", "B"])


def test_iter_jsonl_bad_json_names_file_and_line(tmp_path):
    path = write(tmp_path / "x.jsonl", '{"src": "a", "tgt": "b"}\n{"src": "a", \n')
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}:2: not valid JSON"):
        list(iter_jsonl(path, "src", "tgt"))


@pytest.mark.parametrize("bad_line", ['{"src": "a"}', '{"src": "a", "tgt": 3}', '["a", "b"]', '"text"'])
def test_iter_jsonl_missing_keys_names_file_and_line(tmp_path, bad_line):
    path = write(tmp_path / "x.jsonl", f'{{"src": "a", "tgt": "b"}}\n\n{bad_line}\n')
    with pytest.raises(
        UserError, match=rf"^{re.escape(str(path))}:3: expected an object with string fields 'src' and 'tgt'$"
    ):
        list(iter_jsonl(path, "src", "tgt"))


# --- Multi30k -----------------------------------------------------------------------------------


def _count_lines(path: Path) -> int:
    return len(gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")) - 1  # files end with "\n"


@pytest.fixture(scope="module")
def multi30k() -> dict:
    if MULTI30K is None:
        pytest.skip(MULTI30K_MISSING)
    return read_splits(DataConfig(kind="multi30k", dir=str(MULTI30K), src_lang="en", tgt_lang="de"))


def test_multi30k_en_de(multi30k):
    assert sorted(multi30k) == ["test", "train", "valid"]
    expected = {"train": ("train", 29000), "valid": ("val", 1014), "test": ("test_2016_flickr", 1000)}
    for split, (name, count) in expected.items():
        sources, targets = multi30k[split]
        assert len(sources) == len(targets) == count
        assert _count_lines(MULTI30K / f"{name}.en.gz") == _count_lines(MULTI30K / f"{name}.de.gz") == count
        first_en = gzip.decompress((MULTI30K / f"{name}.en.gz").read_bytes()).decode("utf-8").split("\n")[0]
        assert sources[0] == first_en.removesuffix("\r")


def test_multi30k_missing_language_names_data_dir():
    if MULTI30K is None:
        pytest.skip(MULTI30K_MISSING)
    cfg = DataConfig(kind="multi30k", dir=str(MULTI30K), src_lang="en", tgt_lang="xx")
    with pytest.raises(UserError, match=rf"^{re.escape(str(MULTI30K))}: no train\.xx or train\.xx\.gz \(data\.dir"):
        read_splits(cfg)


def test_multi30k_missing_dir_says_it_is_missing_and_how_to_fetch_it(tmp_path):
    """The one command a user with a fresh clone needs (scripts/get_multi30k.py), in the one-line error;
    the cache key (corpus_sources) is computed first, so it must say the same."""
    missing = tmp_path / "my data"
    expected = (
        f"data.dir={missing}: no such folder; fetch Multi30k into it with: python scripts/get_multi30k.py '{missing}'"
    )
    cfg = DataConfig(kind="multi30k", dir=str(missing))
    for read in (read_splits, corpus_sources):
        with pytest.raises(UserError) as caught:
            read(cfg)
        assert str(caught.value) == expected


def test_multi30k_a_file_as_data_dir_is_not_a_directory(tmp_path):
    path = write(tmp_path / "nothing", "x")
    with pytest.raises(UserError, match=r"^data\.dir=.*nothing: not a directory$"):
        read_splits(DataConfig(kind="multi30k", dir=str(path)))


def test_multi30k_small_copy(tmp_path):
    """A mix of plain and .gz files in data.dir is fine."""
    for split, lines in {"train": ["a", "b"], "val": ["c"], "test_2016_flickr": ["d"]}.items():
        write(tmp_path / f"{split}.en", "\n".join(lines) + "\n")
        write(tmp_path / f"{split}.de.gz", gzip.compress(("\n".join(x.upper() for x in lines) + "\n").encode()))
    corpus = read_splits(DataConfig(kind="multi30k", dir=str(tmp_path), src_lang="en", tgt_lang="de"))
    assert corpus == {"train": (["a", "b"], ["A", "B"]), "valid": (["c"], ["C"]), "test": (["d"], ["D"])}


# --- splits --------------------------------------------------------------------------------


def _files(tmp_path: Path, train: str, valid: str = "v\n") -> DataConfig:
    paths = {}
    for name, text in {"train_src": train, "train_tgt": train, "valid_src": valid, "valid_tgt": valid}.items():
        paths[name] = str(write(tmp_path / name, text))
    return DataConfig(kind="parallel_files", **paths)


def test_read_splits_parallel_files(tmp_path):
    corpus = read_splits(_files(tmp_path, "a\nb\n"))
    assert corpus == {"train": (["a", "b"], ["a", "b"]), "valid": (["v"], ["v"])}


@pytest.mark.parametrize("empty", ["train", "valid"])
def test_require_pairs_names_the_files_of_an_empty_split(tmp_path, empty):
    cfg = _files(tmp_path, "" if empty == "train" else "a\n", valid="" if empty == "valid" else "v\n")
    with pytest.raises(UserError) as info:
        require_pairs(cfg, empty, len(read_splits(cfg)[empty][0]))
    assert str(info.value) == (
        f"the {empty} split of data.kind=parallel_files is empty: no pairs in {tmp_path / f'{empty}_src'} and "
        f"{tmp_path / f'{empty}_tgt'}"
    )


def test_read_splits_tsv_with_test_split(tmp_path):
    cfg = DataConfig(
        kind="tsv",
        train=str(write(tmp_path / "t.tsv", "a\tA\n")),
        valid=str(write(tmp_path / "v.tsv", "b\tB\n")),
        test=str(write(tmp_path / "x.tsv", "c\tC\n")),
    )
    assert read_splits(cfg) == {"train": (["a"], ["A"]), "valid": (["b"], ["B"]), "test": (["c"], ["C"])}


# --- the built-in task --------------------------------------------------------------------------

TASK = DataConfig(
    task_train_size=600, task_valid_size=50, task_test_size=40, task_min_len=2, task_max_len=6, task_alphabet=5
)


def test_reverse_task_targets_are_reversed_uppercased_sources():
    corpus = reverse_task(TASK)
    letters = set("abcde")
    for sources, targets in corpus.values():
        for source, target in zip(sources, targets, strict=True):
            tokens = source.split(" ")
            assert 2 <= len(tokens) <= 6 and set(tokens) <= letters
            assert target.split(" ") == [t.upper() for t in tokens[::-1]]


def test_reverse_task_sizes_and_held_out_sources():
    corpus = reverse_task(TASK)
    assert {split: len(pair[0]) for split, pair in corpus.items()} == {"train": 600, "valid": 50, "test": 40}
    train = set(corpus["train"][0])
    held_out = set(corpus["valid"][0]) | set(corpus["test"][0])
    assert not train & held_out
    assert len(held_out) == 90  # no duplicates within or across the held-out splits


def test_reverse_task_is_deterministic():
    assert reverse_task(TASK) == reverse_task(dataclasses.replace(TASK))
    assert reverse_task(TASK) != reverse_task(dataclasses.replace(TASK, task_alphabet=6))


def test_reverse_task_through_iter_split():
    assert read_splits(TASK) == reverse_task(TASK)
