"""A run's corpus, planned once from its data settings before anything is tokenized: what is read,
cleaned, tokenized and cached, and under which key.

    data config -> CorpusPlan: each direction with its own settings; every (corpus, direction) stream
    with its cleaning rules; the files by content (SHA-256); the tokenizer to train (or the one given);
    the cache key and folder

pipeline.py builds and loads the cache from the plan, streaming.py reads its streams, and each reader
below them is handed the one direction's settings it reads: no rule (is the run multilingual, what are
a direction's files, what does the cache key cover) is worked out twice, and the files are hashed once
(a resume's corpus check reads the plan's digests). A plan is made per call, never kept between
calls: a file edited since must be hashed again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seq2seq.config import DataConfig, UserError, as_dict, clean_rules, data_config
from seq2seq.data.corpora import (
    BACK_TRANSLATION_TAG,
    SINGLE_CORPUS,
    AlignmentScorers,
    Stream,
    check_back_translations,
    corpus_config,
    corpus_lines,
    named_error,
)
from seq2seq.data.corpus import corpus_sources
from seq2seq.data.directions import (
    Direction,
    check_readable_per_direction,
    configured_directions,
    direction_settings,
    tag_tokens,
)
from seq2seq.data.tokenizer import pretrained_tokenizer_files
from seq2seq.measurement_cache import cache_root

CACHE_VERSION = 4  # bump when the cached layout, tokenization or filtering changes (4: blank sides, TSV columns)
# How a file is recorded: {"path" (resolved), "bytes", "sha256"}; None for a file that cannot be read.
CorpusFile = dict[str, Any]


@dataclass(frozen=True)
class TokenizerPlan:
    """The tokenizers a run trains on its training text, or the pretrained ones it uses as they are."""

    kind: str  # data.tokenizer
    vocab_size: int
    joint: bool
    sentencepiece_type: str
    special: tuple[str, ...]  # tokens the vocabulary must hold whole: the language tags, then <BT>
    pretrained: Path | None = None  # a directory of SentencePiece tokenizers used instead of training one

    @classmethod
    def of(cls, data: DataConfig, pretrained: Path | None = None) -> TokenizerPlan:
        """The tokenizer a data config asks for; its special tokens are its directions' and corpora's tags."""
        special = (*tag_tokens(data), *corpus_tags(data))  # none for one direction of untagged corpora
        return cls(data.tokenizer, data.vocab_size, data.joint_vocab, data.sentencepiece_type, special, pretrained)


@dataclass(frozen=True)
class CorpusPlan:
    data: DataConfig  # the run's data settings (the filters, the streaming buffer, the tag placement)
    # data.directions, each with its single-direction settings ({src} and {tgt} replaced); () for one
    directions: tuple[tuple[Direction, DataConfig], ...]
    streams: tuple[Stream, ...]  # every (corpus, direction) the training split is read from, in order
    languages: tuple[str, ...]  # what the language rule's identifier may answer
    corpus_names: tuple[str, ...]  # data.corpora's, in order; () without data.corpora
    corpus_weights: tuple[float, ...]
    tagged: tuple[int, ...]  # the corpora whose sources start with <BT>
    tokenizer: TokenizerPlan
    files: tuple[CorpusFile, ...]  # every file read, by content: the cache key's, and a checkpoint's record
    key: str  # the cache key: the settings that decide the cached data, and the files' digests
    root: Path  # the cache folder: data.cache_dir, else the cache root ($SEQ2SEQ_CACHE)
    # data.streaming: the alignment rule's scorer of each stream, learnt once from its head by whichever
    # reads it first (the cache's build, for the tokenizer's head, else training's first pass) and
    # judging every later pass of this run. Not a setting: the plan's streams and data.clean_settings
    # decide it, and a plan is made per run, so a changed corpus or setting never meets a stale one.
    alignment: AlignmentScorers = field(default_factory=dict, compare=False, repr=False)
    # data.streaming with data.corpora: each stream's lines (by its label), counted once a run by
    # `lines_of` (the cache's build, the start-up log and training's interleave all need them)
    line_counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def lines_of(self) -> list[int]:
        """Each stream's lines (corpora.corpus_lines), counted the first time they are asked for."""
        for stream in self.streams:
            if stream.label not in self.line_counts:
                self.line_counts[stream.label] = corpus_lines(stream)
        return [self.line_counts[stream.label] for stream in self.streams]

    @property
    def multilingual(self) -> bool:
        """The run tags its sentences: data.directions is set (even with one entry)."""
        return bool(self.directions)

    @property
    def target(self) -> Path:
        """Where the tokenized data are cached."""
        return self.root / self.key


def plan_corpus(
    data: DataConfig | Any, pretrained: Path | None = None, files: Sequence[CorpusFile] | None = None
) -> CorpusPlan:
    """The corpus `data` (a DataConfig, or Hydra's data section) describes. `pretrained`: a directory of
    SentencePiece tokenizers used instead of training one (their contents are part of the key).
    `files`: the corpus's files as `plan_corpus(...).files` recorded them, when the caller read them
    already; else they are hashed here."""
    settings = as_dict(data) if not isinstance(data, dict) else dict(data)
    one = data_config(settings)
    check_readable_per_direction(one)  # before any file is hashed: a config that reads one file for all is one line
    directions = tuple((d, direction_settings(one, d)) for d in configured_directions(one))
    streams = tuple(training_streams(one, directions))
    check_back_translations(streams)  # how the files are read: at every start, cached or not
    if files is None:
        files = corpus_files(one, directions, streams)
    return CorpusPlan(
        data=one,
        directions=directions,
        streams=streams,
        languages=tuple(language_candidates(one)),
        corpus_names=tuple(corpus.name for corpus in one.corpora or ()),
        corpus_weights=tuple(float(corpus.weight) for corpus in one.corpora or ()),
        tagged=tuple(tagged_corpora(one)),
        tokenizer=TokenizerPlan.of(one, pretrained),
        files=tuple(files),
        key=_cache_key(settings, one, streams, pretrained, files),
        root=Path(one.cache_dir) if one.cache_dir else cache_root(),
    )


def training_streams(data: DataConfig, directions: Sequence[tuple[Direction, DataConfig]]) -> list[Stream]:
    """Every (corpus, direction) the training split is read from, corpora first, in config order; read
    by seq2seq.data.corpora. `directions`: data.directions, each with its single-direction settings
    (the plan's); () for a run of one direction."""
    corpora = list(data.corpora) if data.corpora else [None]
    streams = []
    for corpus_index, corpus in enumerate(corpora):
        base = data if corpus is None else corpus_config(data, corpus)
        rules = clean_rules(data.clean if corpus is None or corpus.clean is None else corpus.clean)
        for direction_index, (direction, settings) in enumerate(directions or [(None, data)]):
            if corpus is not None and direction is not None:  # the corpus's own files, in this direction
                settings = direction_settings(base, direction)
            elif corpus is not None:
                settings = base
            name = SINGLE_CORPUS if corpus is None else corpus.name
            label = name if direction is None else f"{name} {direction.name}"
            extra = (() if direction is None else (direction_index,)) + (() if corpus is None else (corpus_index,))
            streams.append(Stream(label, None if corpus is None else name, settings, direction, extra, rules))
    return streams


def tagged_corpora(data: DataConfig) -> list[int]:
    """The indices of the corpora whose sources carry BACK_TRANSLATION_TAG."""
    return [index for index, corpus in enumerate(data.corpora or ()) if corpus.tag]


def corpus_tags(data: DataConfig) -> list[str]:
    """The special tokens data.corpora adds to the vocabulary: the tag, when a corpus is tagged."""
    return [BACK_TRANSLATION_TAG] if tagged_corpora(data) else []


def training_sources(streams: Sequence[Stream]) -> list[str]:
    """The files of every stream (each once, in order), for the cache key."""
    sources: list[str] = []
    for stream in streams:
        try:
            named = corpus_sources(stream.cfg)
        except UserError as err:
            if stream.corpus is None and stream.direction is None:
                raise
            raise named_error(err, stream) from err
        sources.extend(name for name in named if name not in sources)
    return sources


def language_candidates(data: DataConfig) -> list[str]:
    """The codes the language rule's identifier may answer: the run's languages (every direction's,
    or data.src_lang and tgt_lang) and data.clean_settings.languages."""
    codes = [data.src_lang, data.tgt_lang]
    for entry in data.directions or ():
        codes.extend(str(entry).split("-"))
    codes.extend(data.clean_settings.languages)
    return sorted(set(codes))


def corpus_files(
    data: DataConfig, directions: Sequence[tuple[Direction, DataConfig]], streams: Sequence[Stream]
) -> list[CorpusFile]:
    """Each file the corpus is read from, by content. A checkpoint records them, so that a resume
    trains on the corpus its run started with (seq2seq.train.resume)."""
    sources = _directed_sources(directions) if directions else corpus_sources(data)
    if data.corpora:
        sources += [name for name in training_sources(streams) if name not in sources]
    found = []
    for name in sources:
        path = Path(name).resolve()
        size = path.stat().st_size if path.is_file() else None
        found.append({"path": str(path), "bytes": size, "sha256": content_digest(path)})
    return found


def _directed_sources(directions: Sequence[tuple[Direction, DataConfig]]) -> list[str]:
    """The files of every direction (each once, in order)."""
    sources: list[str] = []
    for direction, one in directions:
        try:
            named = corpus_sources(one)
        except UserError as err:
            raise UserError(f"data.directions={direction.name}: {err}") from err
        sources.extend(name for name in named if name not in sources)
    return sources


def content_digest(path: Path) -> str | None:
    """The SHA-256 of a file's bytes, read in chunks (a corpus need not fit in memory); None for a
    file that cannot be read, which reading the corpus then reports."""
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _cache_key(
    settings: dict[str, Any],
    data: DataConfig,
    streams: Sequence[Stream],
    pretrained: Path | None,
    files: Sequence[CorpusFile],
) -> str:
    """The settings that decide the cached data (`settings`: the data config as given), the files'
    digests, and a pretrained tokenizer's files."""
    # The sampling temperature acts on batching, not on what is cached; a single-direction run's cache
    # keeps the key it had before data.directions existed.
    unkeyed = ("cache_dir", "stream_buffer_pairs", "sampling_temperature")
    if not data.directions:
        unkeyed += ("directions", "lang_tag")
    # ... and a run without data.corpora or cleaning the key it had before they existed
    if not data.corpora:
        unkeyed += ("corpora",)
    if not any(stream.rules for stream in streams):
        unkeyed += ("clean", "clean_settings")
    if not data.prune_vocab:  # ... and a run that keeps the whole vocabulary the key it had before
        unkeyed += ("prune_vocab",)
    keyed = {k: v for k, v in settings.items() if k not in unkeyed}
    if data.tokenizer != "sentencepiece":  # a byte-level run's cache keeps the key it had before the key existed
        del keyed["sentencepiece_type"]
    key = {"version": CACHE_VERSION, "data": keyed, "files": [[f["path"], f["sha256"]] for f in files]}
    if pretrained is not None:
        key["tokenizers"] = [
            hashlib.sha256(path.read_bytes()).hexdigest() for path in pretrained_tokenizer_files(pretrained)
        ]
        if data.prune_vocab:  # the pruned tokenizer names the directory its rows came from (for the export)
            key["pruned_from"] = str(pretrained.resolve())
    blob = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
