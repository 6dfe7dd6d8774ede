"""The corpus of a multilingual run (data.directions): every direction read by the bilingual readers,
one vocabulary learnt from each language's text, and each pair tagged with its target language.

Pairs carry their direction's index (the order of data.directions) in a `direction` column, from the
raw text through the cached token ids, so sampling can give each direction its share (see
epoch_mix) and validation can be scored per direction. Each function is handed the
directions as the corpus plan made them (seq2seq.data.corpus_plan): each with its own settings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from seq2seq.config import DataConfig, UserError
from seq2seq.data.corpora import CORPUS, DIRECTION, Stream
from seq2seq.data.corpus import iter_split, require_pairs
from seq2seq.data.directions import TARGET_TAGGED, Direction, LanguageTags

# data.directions as the corpus plan holds them: each direction with its single-direction settings.
Directions = Sequence[tuple[Direction, DataConfig]]


def iter_directed_pairs(directions: Directions, split: str, counts: dict[str, int]) -> Iterator[tuple[str, str, int]]:
    """(source, target, direction index) of every direction's `split`, one direction after another.
    `counts` receives each direction's pairs as they are read. A reader's error (a missing file, a
    bad line) names the direction it was reading."""
    for index, (direction, one) in enumerate(directions):
        counts[direction.name] = 0
        try:
            pairs = iter_split(one, split)
            for src, tgt in pairs if pairs is not None else ():
                counts[direction.name] += 1
                yield src, tgt, index
        except UserError as err:
            raise UserError(f"data.directions={direction.name}: {err}") from err


def unzip_directed(rows: Iterable[tuple[str, str, int]]) -> tuple[list[str], list[str], list[int]]:
    """(sources, targets, direction indices) of (source, target, direction) rows."""
    sources, targets, directions = [], [], []
    for src, tgt, direction in rows:
        sources.append(src)
        targets.append(tgt)
        directions.append(direction)
    return sources, targets, directions


def require_every_direction(directions: Directions, split: str, counts: dict[str, int]) -> None:
    """A direction listed without pairs in `split`: the error names it and its files."""
    for direction, one in directions:
        try:
            require_pairs(one, split, counts.get(direction.name, 0))
        except UserError as err:
            raise UserError(f"data.directions={direction.name}: {err}") from err


def side_source(one: Any, side: str) -> tuple:
    """Where one side of a stream's training text comes from (`one`: its single-direction, single-corpus
    config): the tokenizer learns each source once (Multi30k's train.en serves en-de, en-fr and en-cs:
    three copies would weigh English three times)."""
    lang = one.src_lang if side == "src" else one.tgt_lang
    if one.kind == "multi30k":
        return ("multi30k", one.dir, lang)
    if one.kind == "parallel_files":
        return ("file", one.train_src if side == "src" else one.train_tgt)
    if one.kind == "jsonl":
        return ("jsonl", one.train, one.src_key if side == "src" else one.tgt_key)
    if one.kind == "tsv":
        return ("tsv", one.train, side)
    return (one.kind, one.hub_name, one.hub_subset, lang)


def tokenizer_texts(
    streams: Sequence[Stream], directions: int, corpora: int, raw: Any, batch_rows: int
) -> tuple[Iterator[str], Iterator[str]]:
    """The source and target texts the tokenizer learns from: of the raw training pairs `raw` (a
    datasets.Dataset with a direction column, and a corpus column with data.corpora), each side whose
    source was not already given by an earlier stream (a corpus in a direction). `directions`,
    `corpora`: how many the run has (corpora: 1 without data.corpora)."""
    seen: set[tuple] = set()
    keep = {"src": {}, "tgt": {}}
    for stream in streams:
        direction, corpus = stream.extra[0], (stream.extra[1] if len(stream.extra) > 1 else 0)
        for side in ("src", "tgt"):
            source = side_source(stream.cfg, side)
            keep[side][direction * corpora + corpus] = source not in seen
            seen.add(source)

    def texts(side: str) -> Iterator[str]:
        wanted = np.zeros(directions * corpora, dtype=bool)
        for code, take in keep[side].items():
            wanted[code] = take
        for batch in raw.iter(batch_size=batch_rows):
            codes = np.asarray(batch[DIRECTION], dtype=np.int64) * corpora
            if CORPUS in batch:
                codes += np.asarray(batch[CORPUS], dtype=np.int64)
            chosen = wanted[codes]
            yield from (text for text, take in zip(batch[f"{side}_text"], chosen, strict=True) if take)

    return texts("src"), texts("tgt")


def direction_tag_ids(tags: LanguageTags, directions: Sequence[Direction]) -> list[tuple[list[int], list[int]]]:
    """Each direction's (by index) ids put before its sources and its targets, where data.lang_tag puts
    them (`tags`: the run's): its target language's tag (or, under language_codes, each side's own
    language code)."""
    return [(tags.source_ids([], d.tgt, d.src), tags.target_prefix(d.tgt)) for d in directions]


def tag_ids(src: list[int], tgt: list[int], tags: tuple[list[int], list[int]]) -> tuple[list[int], list[int]]:
    """A pair's ids with its direction's tags (`direction_tag_ids`)."""
    return [*tags[0], *src], [*tags[1], *tgt]


def tag_directions(
    ids: list[tuple[list[int], list[int]]], sources: list[list[int]], targets: list[list[int]], directions: list[int]
) -> tuple[list[list[int]], list[list[int]]]:
    """Held-out pairs' ids, tagged (lists, in place of the untagged ones); `ids`: `direction_tag_ids`."""
    tagged = [tag_ids(s, t, ids[d]) for s, t, d in zip(sources, targets, directions, strict=True)]
    return [s for s, _ in tagged], [t for _, t in tagged]


def attach_directions(
    data: Any, directions: Sequence[Direction], lang_tag: str, temperature: float, tags: LanguageTags | None
) -> None:
    """What the cached splits do not hold: the direction names, the sampling temperature, where the tag
    is (data.lang_tag), and the run's LanguageTags `tags` (on PreparedData, for validation, translation
    and export)."""
    names = tuple(d.name for d in directions)
    for split in (data.train, data.valid):
        if split is not None:
            split.direction_names = names
            split.target_tag = lang_tag in TARGET_TAGGED
    if data.train is not None:
        data.train.sampling_temperature = float(temperature)
    data.languages = tags
