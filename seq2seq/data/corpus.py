"""Reading parallel text: plain or gzipped line files, TSV, JSONL, Multi30k, a datasets hub name.

Every reader yields the same thing, (source, target) pairs one split at a time (`iter_split`), and
every problem with a file is a `UserError` naming the file (and the line, where there is one). Lines are split on "\\n" only:
str.splitlines would also split on U+2028, U+0085 and friends and silently misalign the two sides.
"""

from __future__ import annotations

import gzip
import json
import shlex
import zlib
from collections.abc import Iterable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO

from seq2seq.config import DataConfig, UserError
from seq2seq.data.builtin import reverse_task

Pairs = tuple[list[str], list[str]]
Corpus = dict[str, Pairs]

MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}

# The keys that name a corpus file (parallel_files, tsv, jsonl).
FILE_KEYS = ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "train", "valid", "test")


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a UTF-8 text file (.gz is decompressed), one at a time, without line endings or a
    leading BOM: a corpus larger than memory can be read this way."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a text file")
    try:
        file = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except OSError as err:
        raise UserError(f"{path}: cannot read after line 0: {err}") from err
    number = 0
    with file:
        # The yield stays outside every try: a reader left unfinished when the process ends (a streamed run
        # stopping mid-epoch) is closed at the yield, where an except clause would look up zlib in a module
        # already torn down ("Exception ignored in: <generator object iter_lines>").
        while line := next_line(file, path, number):  # binary files split on b"\n" only
            number += 1
            try:
                decoded = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the line") from err
            if number == 1:
                decoded = decoded.removeprefix("\ufeff")
            yield decoded.removesuffix("\n").removesuffix("\r")


def next_line(file: BinaryIO, path: Path, number: int) -> bytes:
    """The next line of `file` (b"" at its end); a failed read is a UserError naming the last line read."""
    try:
        return file.readline()
    except (OSError, EOFError, zlib.error) as err:  # zlib.error: a corrupt .gz
        raise UserError(f"{path}: cannot read after line {number}: {err}") from err


def read_lines(path: str | Path) -> list[str]:
    return list(iter_lines(path))


def unzip(pairs: Iterable[tuple[str, str]]) -> Pairs:
    sources, targets = [], []
    for src, tgt in pairs:
        sources.append(src)
        targets.append(tgt)
    return sources, targets


def iter_parallel(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    sources, targets = iter_lines(src_path), iter_lines(tgt_path)
    count = 0
    for count, pair in enumerate(zip_longest(sources, targets), start=1):
        if None in pair:
            src_count = count - 1 + sum(1 for _ in sources) + (pair[0] is not None)
            tgt_count = count - 1 + sum(1 for _ in targets) + (pair[1] is not None)
            raise UserError(f"{src_path} has {src_count} lines but {tgt_path} has {tgt_count}: they must pair up")
        yield pair


def iter_tsv(path: str | Path) -> Iterator[tuple[str, str]]:
    """Exactly two columns a line: a third column (an id, a score, a misplaced tab) would otherwise be
    trained into the target without a word, so it is refused where it is."""
    for number, line in enumerate(iter_lines(path), start=1):
        columns = line.split("\t")
        if len(columns) == 1:
            raise UserError(f"{path}:{number}: expected 'source<TAB>target', found no tab")
        if len(columns) > 2:
            raise UserError(f"{path}:{number}: {len(columns)} tab-separated columns; data=tsv takes 2 (source, target)")
        yield columns[0], columns[1]


def iter_jsonl(path: str | Path, src_key: str, tgt_key: str) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{number}: not valid JSON: {err.msg}") from err
        if (
            not isinstance(record, dict)
            or not isinstance(record.get(src_key), str)
            or not isinstance(record.get(tgt_key), str)
        ):
            raise UserError(f"{path}:{number}: expected an object with string fields {src_key!r} and {tgt_key!r}")
        yield record[src_key], record[tgt_key]


def multi30k_file(directory: Path, split: str, lang: str) -> Path:
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (directory / name).is_file():
            return directory / name
    raise UserError(
        f"{directory}: no {split}.{lang} or {split}.{lang}.gz (data.dir, data.src_lang/tgt_lang); "
        f"Multi30k's en/de/fr/cs files: {fetch_multi30k_command(directory)}"
    )


def multi30k_dir(data: DataConfig) -> Path:
    """data.dir, which must be a folder: when it is missing, the error gives the command that fetches Multi30k."""
    directory = Path(data.dir)
    if not directory.exists():
        raise UserError(
            f"data.dir={data.dir}: no such folder; fetch Multi30k into it with: {fetch_multi30k_command(directory)}"
        )
    if not directory.is_dir():
        raise UserError(f"data.dir={data.dir}: not a directory")
    return directory


def check_corpus_exists(data: DataConfig) -> None:
    """The folder or files the corpus is read from are there, reading none of them: seq2seq-train
    checks it before torch loads, so that a path typed wrong is answered at once."""
    if data.kind == "multi30k":
        multi30k_dir(data)
        return
    for key in FILE_KEYS:
        if (path := getattr(data, key)) and not Path(path).exists():
            raise UserError(f"data.{key}={path}: no such file")


def fetch_multi30k_command(directory: Path) -> str:
    return f"python scripts/get_multi30k.py {shlex.quote(str(directory))}"


def iter_multi30k(data: DataConfig, split: str) -> Iterator[tuple[str, str]]:
    directory = multi30k_dir(data)
    name = MULTI30K_SPLITS[split]
    return iter_parallel(multi30k_file(directory, name, data.src_lang), multi30k_file(directory, name, data.tgt_lang))


def read_hub(data: DataConfig) -> Corpus:
    """A translation dataset from the hub (rows {"translation": {src_lang: .., tgt_lang: ..}}); needs the network."""
    import datasets

    loaded = datasets.load_dataset(data.hub_name, data.hub_subset)
    corpus = {}
    for split, names in {"train": ("train",), "valid": ("validation", "valid", "dev"), "test": ("test",)}.items():
        name = next((n for n in names if n in loaded), None)
        if name is not None:
            pairs = loaded[name]["translation"]
            corpus[split] = ([p[data.src_lang] for p in pairs], [p[data.tgt_lang] for p in pairs])
    return corpus


def iter_split(data: DataConfig, split: str) -> Iterator[tuple[str, str]] | None:
    """The (source, target) pairs of one split (train, valid or test), read lazily from the corpus
    files so that a corpus larger than memory can be tokenized; None when the config has no such split."""
    if data.kind == "multi30k":
        return iter_multi30k(data, split)
    if data.kind == "parallel_files":
        src, tgt = getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")
        return iter_parallel(src, tgt) if src and tgt else None
    if data.kind in ("tsv", "jsonl"):
        path = getattr(data, split)
        if not path:
            return None
        return iter_tsv(path) if data.kind == "tsv" else iter_jsonl(path, data.src_key, data.tgt_key)
    corpus = reverse_task(data) if data.kind == "builtin" else read_hub(data)  # already in memory
    return zip(*corpus[split], strict=True) if split in corpus else None


def require_pairs(data: DataConfig, split: str, count: int) -> None:
    if count == 0:
        files = split_files(data, split)
        where = f": no pairs in {' and '.join(files)}" if files else ""
        raise UserError(f"the {split} split of data.kind={data.kind} is empty{where}")


def split_files(data: DataConfig, split: str) -> list[str]:
    """The files a split is read from (error messages; whether a split is there); empty for generated or
    hub data. Multi30k without a language's file: the UserError multi30k_file gives."""
    if data.kind == "parallel_files":
        return [getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")]
    if data.kind in ("tsv", "jsonl"):
        return [getattr(data, split)]
    if data.kind == "multi30k":
        name = MULTI30K_SPLITS[split]
        return [str(multi30k_file(multi30k_dir(data), name, lang)) for lang in (data.src_lang, data.tgt_lang)]
    return []


def corpus_sources(data: DataConfig) -> list[str]:
    """Files the corpus is read from (for the cache key); empty for generated or hub data."""
    if data.kind == "multi30k":
        directory = multi30k_dir(data)
        return [
            str(multi30k_file(directory, n, lang))
            for n in MULTI30K_SPLITS.values()
            for lang in (data.src_lang, data.tgt_lang)
        ]
    return [getattr(data, k) for k in FILE_KEYS if getattr(data, k)]
