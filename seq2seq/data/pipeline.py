"""From a data config to tokenized, filtered splits, cached as Arrow so the next run starts at once.

    read_corpus -> train tokenizer on the train split -> tokenize (datasets.map) -> filter train
    -> save_to_disk(cache/<key>) ... next run with the same data and tokenizer settings: load_from_disk

The cache key covers the data config and each corpus file's path, size and modification time, so an
edited file is re-read. Loaded datasets are memory-mapped: the token ids are never Python lists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np

from seq2seq.config import DataConfig, UserError, as_dict
from seq2seq.data.corpus import corpus_sources, read_corpus
from seq2seq.data.tokenizer import Tokenizers

log = logging.getLogger(__name__)
datasets.disable_progress_bars()  # our own log line says what is happening; tqdm is for training
CACHE_VERSION = 2  # bump when the cached layout or tokenization changes


@dataclass
class TokenColumn:
    """One side of a split as flat token ids plus offsets (zero-copy views of the Arrow data)."""

    values: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_dataset(cls, dataset: datasets.Dataset, column: str) -> TokenColumn:
        array = dataset.data.column(column).combine_chunks()
        offsets = array.offsets.to_numpy()
        return cls(array.values.to_numpy(zero_copy_only=False), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.values[self.offsets[index] : self.offsets[index + 1]]


@dataclass
class Split:
    src: TokenColumn
    tgt: TokenColumn
    src_text: list[str] | None = None  # raw text, kept for held-out splits (BLEU needs it)
    tgt_text: list[str] | None = None

    def __len__(self) -> int:
        return len(self.src)


@dataclass
class PreparedData:
    tokenizers: Tokenizers
    train: Split
    valid: Split
    stats: dict[str, int]  # pairs read, kept and dropped (by reason)


def cache_key(cfg: DataConfig) -> str:
    files = []
    for name in corpus_sources(cfg):
        path = Path(name).resolve()
        stat = path.stat() if path.exists() else None
        files.append([str(path), stat.st_size if stat else None, stat.st_mtime_ns if stat else None])
    settings = {k: v for k, v in as_dict(cfg).items() if k != "cache_dir"}
    blob = json.dumps({"version": CACHE_VERSION, "data": settings, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def default_cache_dir() -> Path:
    return Path(os.environ.get("SEQ2SEQ_CACHE", Path.home() / ".cache" / "seq2seq"))


def keep_pair(src_len: int, tgt_len: int, max_tokens: int, max_ratio: float) -> str | None:
    """None to keep a training pair, else the reason it is dropped."""
    if src_len == 0 or tgt_len == 0:
        return "dropped_empty"
    if src_len > max_tokens or tgt_len > max_tokens:
        return "dropped_too_long"
    if max(src_len, tgt_len) / min(src_len, tgt_len) > max_ratio:
        return "dropped_length_ratio"
    return None


def _tokenize(tokenizers: Tokenizers, sources: list[str], targets: list[str]) -> datasets.Dataset:
    dataset = datasets.Dataset.from_dict({"src_text": sources, "tgt_text": targets})

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return {
            "src_ids": tokenizers.encode_src(batch["src_text"]),
            "tgt_ids": tokenizers.encode_tgt(batch["tgt_text"]),
        }

    features = datasets.Features(
        {
            "src_text": datasets.Value("string"),
            "tgt_text": datasets.Value("string"),
            "src_ids": datasets.Sequence(datasets.Value("int32")),
            "tgt_ids": datasets.Sequence(datasets.Value("int32")),
        }
    )
    return dataset.map(encode, batched=True, batch_size=10_000, features=features)


def _build(cfg: DataConfig, target: Path) -> None:
    corpus = read_corpus(cfg)
    tokenizers = Tokenizers.train(*corpus["train"], cfg.tokenizer, cfg.vocab_size, cfg.joint_vocab)
    train = _tokenize(tokenizers, *corpus["train"])
    stats = {"train_pairs": len(train), "dropped_empty": 0, "dropped_too_long": 0, "dropped_length_ratio": 0}
    reasons = [
        keep_pair(len(s), len(t), cfg.max_tokens, cfg.max_length_ratio)
        for s, t in zip(train["src_ids"], train["tgt_ids"], strict=True)
    ]
    for reason in reasons:
        if reason:
            stats[reason] += 1
    train = train.select([i for i, r in enumerate(reasons) if r is None]).remove_columns(["src_text", "tgt_text"])
    stats["train_kept"] = len(train)
    if len(train) == 0:
        raise UserError(
            f"no training pair survives filtering (data.max_tokens={cfg.max_tokens}, "
            f"data.max_length_ratio={cfg.max_length_ratio})"
        )
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        tokenizers.save(staging)
        train.flatten_indices().save_to_disk(str(staging / "train"))
        _tokenize(tokenizers, *corpus["valid"]).save_to_disk(str(staging / "valid"))
        (staging / "stats.json").write_text(json.dumps(stats))
        # Publish whole or not at all: a crash mid-build leaves only a staging directory.
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(staging)  # another process published the same data first: use theirs
    except BaseException:  # an error (not a crash) leaves nothing behind
        shutil.rmtree(staging, ignore_errors=True)
        raise


def prepare_data(cfg: DataConfig, barrier: Callable[[], None] = lambda: None, is_main: bool = True) -> PreparedData:
    """Tokenized splits for `cfg`, built once and then loaded from the cache. Under DDP only the
    main process builds; the others wait at `barrier` and load what it wrote."""
    root = Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    target = root / cache_key(cfg)
    if is_main and not target.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        log.info("tokenizing the corpus (cached in %s for the next run)", target)
        _build(cfg, target)
    barrier()
    train = datasets.load_from_disk(str(target / "train"))
    valid = datasets.load_from_disk(str(target / "valid"))
    return PreparedData(
        tokenizers=Tokenizers.load(target),
        train=Split(TokenColumn.from_dataset(train, "src_ids"), TokenColumn.from_dataset(train, "tgt_ids")),
        valid=Split(
            TokenColumn.from_dataset(valid, "src_ids"),
            TokenColumn.from_dataset(valid, "tgt_ids"),
            valid["src_text"],
            valid["tgt_text"],
        ),
        stats=json.loads((target / "stats.json").read_text()),
    )
