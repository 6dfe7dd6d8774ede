"""Reading parallel text: plain or gzipped line files, TSV, JSONL, Multi30k, a datasets hub name.

Every reader returns the same thing, {split: (sources, targets)}, and every problem with a file is
a `UserError` naming the file (and the line, where there is one). Lines are split on "\\n" only:
str.splitlines would also split on U+2028, U+0085 and friends and silently misalign the two sides.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from seq2seq.config import DataConfig, UserError
from seq2seq.data.builtin import reverse_task

Pairs = tuple[list[str], list[str]]
Corpus = dict[str, Pairs]

MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (.gz is decompressed), without line endings or a leading BOM."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a text file")
    try:
        raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError) as err:
        raise UserError(f"{path}: cannot read: {err}") from err
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":  # the newline that ends the last line
        lines.pop()
    text = []
    for number, line in enumerate(lines, start=1):
        try:
            decoded = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"{path}:{number}: invalid UTF-8 at byte {err.start} of the line") from err
        if number == 1:
            decoded = decoded.removeprefix("\ufeff")
        text.append(decoded.removesuffix("\r"))
    return text


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Pairs:
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise UserError(f"{src_path} has {len(sources)} lines but {tgt_path} has {len(targets)}: they must pair up")
    return sources, targets


def read_tsv(path: str | Path) -> Pairs:
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
        if "\t" not in line:
            raise UserError(f"{path}:{number}: expected 'source<TAB>target', found no tab")
        src, tgt = line.split("\t", 1)
        sources.append(src)
        targets.append(tgt)
    return sources, targets


def read_jsonl(path: str | Path, src_key: str, tgt_key: str) -> Pairs:
    sources, targets = [], []
    for number, line in enumerate(read_lines(path), start=1):
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
        sources.append(record[src_key])
        targets.append(record[tgt_key])
    return sources, targets


def multi30k_file(directory: Path, split: str, lang: str) -> Path:
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (directory / name).is_file():
            return directory / name
    raise UserError(f"{directory}: no {split}.{lang} or {split}.{lang}.gz (data.dir, data.src_lang/tgt_lang)")


def read_multi30k(cfg: DataConfig) -> Corpus:
    directory = Path(cfg.dir)
    if not directory.is_dir():
        raise UserError(f"data.dir={cfg.dir}: not a directory")
    return {
        split: read_parallel(multi30k_file(directory, name, cfg.src_lang), multi30k_file(directory, name, cfg.tgt_lang))
        for split, name in MULTI30K_SPLITS.items()
    }


def read_hub(cfg: DataConfig) -> Corpus:
    """A translation dataset from the hub (rows {"translation": {src_lang: .., tgt_lang: ..}}); needs the network."""
    import datasets

    loaded = datasets.load_dataset(cfg.hub_name, cfg.hub_subset)
    corpus = {}
    for split, names in {"train": ("train",), "valid": ("validation", "valid", "dev"), "test": ("test",)}.items():
        name = next((n for n in names if n in loaded), None)
        if name is not None:
            pairs = loaded[name]["translation"]
            corpus[split] = ([p[cfg.src_lang] for p in pairs], [p[cfg.tgt_lang] for p in pairs])
    return corpus


def read_corpus(cfg: DataConfig) -> Corpus:
    """All splits the config names. train and valid are required; test is optional."""
    if cfg.kind == "builtin":
        corpus = reverse_task(cfg)
    elif cfg.kind == "multi30k":
        corpus = read_multi30k(cfg)
    elif cfg.kind == "parallel_files":
        corpus = {
            "train": read_parallel(cfg.train_src, cfg.train_tgt),
            "valid": read_parallel(cfg.valid_src, cfg.valid_tgt),
        }
        if cfg.test_src and cfg.test_tgt:
            corpus["test"] = read_parallel(cfg.test_src, cfg.test_tgt)
    elif cfg.kind in ("tsv", "jsonl"):
        paths = {split: getattr(cfg, split) for split in ("train", "valid", "test") if getattr(cfg, split)}
        read = read_tsv if cfg.kind == "tsv" else (lambda p: read_jsonl(p, cfg.src_key, cfg.tgt_key))
        corpus = {split: read(path) for split, path in paths.items()}
    else:
        corpus = read_hub(cfg)
    for split in ("train", "valid"):
        if split not in corpus or not corpus[split][0]:
            files = _split_files(cfg, split)
            where = f": no pairs in {' and '.join(files)}" if files else ""
            raise UserError(f"the {split} split of data.kind={cfg.kind} is empty{where}")
    return corpus


def _split_files(cfg: DataConfig, split: str) -> list[str]:
    """The files a split is read from, for error messages; empty for generated or hub data."""
    if cfg.kind == "parallel_files":
        return [getattr(cfg, f"{split}_src"), getattr(cfg, f"{split}_tgt")]
    if cfg.kind in ("tsv", "jsonl"):
        return [getattr(cfg, split)]
    if cfg.kind == "multi30k":
        name = MULTI30K_SPLITS[split]
        return [str(multi30k_file(Path(cfg.dir), name, lang)) for lang in (cfg.src_lang, cfg.tgt_lang)]
    return []


def corpus_sources(cfg: DataConfig) -> list[str]:
    """Files the corpus is read from (for the cache key); empty for generated or hub data."""
    if cfg.kind == "multi30k":
        directory = Path(cfg.dir)
        return [
            str(multi30k_file(directory, n, lang))
            for n in MULTI30K_SPLITS.values()
            for lang in (cfg.src_lang, cfg.tgt_lang)
        ]
    keys = ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt", "train", "valid", "test")
    return [getattr(cfg, k) for k in keys if getattr(cfg, k)]
