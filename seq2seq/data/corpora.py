"""The training pairs of a run, read from every corpus and every direction it names (data.corpora,
data.directions), each stream cleaned by its rules (seq2seq.data.cleaning) on the way.

Without data.corpora the run has one corpus, data.kind's training split, exactly as before the key
existed. With it, each entry is read by the bilingual readers of seq2seq.data.corpus as if it were
data.kind (its own kind and files), and each pair carries its corpus's index (the order of
data.corpora) in a `corpus` column, from the raw text through the cached token ids, so that an epoch
can show each corpus its weight's worth (epoch_mix.py).

**Streamed** (data.streaming with data.corpora): an epoch of several corpora as one stream of rows, each
corpus its weight's worth, the corpora interleaved, and no corpus ever held in memory (docs/corpora.md,
"Streaming").

A corpus at weight w is read floor(w) times in full, and once more for the fraction f = w - floor(w): of
its n kept pairs that pass takes floor(n f + u), u drawn from the epoch's generator (n f rounded down or
up), drawn without replacement within each block of BLOCK kept pairs (a block ending at pair k brings
the count taken to floor(k f + u), so the sample is spread over the corpus), another sample each epoch.
The cached mode draws from the whole corpus at once; a stream holds one block. Each pass is cleaned
afresh, so its duplicates are those within the pass, as the cached mode's are those within the corpus;
the alignment rule's word tables, learnt from the corpus's head, are learnt once and judge every pass.

The passes run side by side: the next line is always read from the corpus furthest behind in the lines
it has to read this epoch (its lines, counted once at the start, times its passes), so every buffer
holds each corpus at about its share of the epoch, and a run that stops before the end of an epoch
has still seen the mix.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import heapq
import json
import math
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.config import CleanSettings, CorpusConfig, DataConfig, UserError
from seq2seq.data.alignment import AlignmentScorer
from seq2seq.data.cleaning import Cleaner, CleaningReport, StreamReport, refuse_emptied
from seq2seq.data.corpus import iter_split, split_files
from seq2seq.data.directions import Direction
from seq2seq.data.language_id import identifier as make_identifier

CORPUS = "corpus"  # the column of a pair's corpus index
# Caswell et al. 2019's tag on back-translated sources: a special token of the vocabulary, so that no
# text spells it (a literal "<BT>" in a sentence is text) and nothing at translation time adds it.
BACK_TRANSLATION_TAG = "<BT>"
# What scripts/back_translate.py writes beside the pairs it makes: their languages, so that a run reading
# them the wrong way round, or for another language, is refused (check_back_translations).
BACK_TRANSLATION_MARK = ".back-translation.json"
DIRECTION = "direction"  # the column of a pair's direction index (seq2seq.data.multilingual's)
# data.kind's training split, as the report and the log name it when data.corpora is not set.
SINGLE_CORPUS = "train"
# What a data.corpora entry sets of the config it is read with: its own files and fields.
CORPUS_FILE_KEYS = ("train_src", "train_tgt", "train", "src_key", "tgt_key", "dir", "hub_name", "hub_subset")


def corpus_config(data: DataConfig, corpus: CorpusConfig) -> DataConfig:
    """A copy of `data` with one corpus of data.corpora as its training split: the corpus's kind and
    files in place of data.kind's (validation and test are not read from it)."""
    taken = {key: getattr(corpus, key) for key in CORPUS_FILE_KEYS}
    return dataclasses.replace(copy.deepcopy(data), corpora=None, kind=corpus.kind, **taken)


@dataclass(frozen=True)
class Stream:
    """The training pairs of one corpus in one direction, as one bilingual config reads them."""

    label: str  # the report's and errors' name: "europarl", "europarl en-de", "train"
    corpus: str | None  # its data.corpora entry's name; None: data.kind's training split
    cfg: DataConfig  # a single-corpus, single-direction config
    direction: Direction | None  # None: a run without data.directions
    extra: tuple[int, ...]  # what each row carries after (source, target): direction and corpus indices
    rules: tuple[str, ...]  # data.clean's (or the corpus's own) rules


# The alignment rule's scorer of each stream (by its label) that a pass learnt, for the next pass to judge
# by: a streamed corpus is read again every epoch, and w times an epoch at weight w. Its tables and cut
# are the corpus's head's (the same at every pass), so learning them again would only cost the time
# again; each pass still has a Cleaner of its own, for its duplicates and its counts. A run's are its
# corpus plan's (CorpusPlan.alignment): the cache's build, reading the tokenizer's head, learns them first.
AlignmentScorers = dict[str, AlignmentScorer]


def stream_cleaner(
    stream: Stream,
    settings: CleanSettings,
    identifier: Any,
    report: CleaningReport,
    scorers: AlignmentScorers | None = None,
) -> Cleaner:
    """The Cleaner of one stream's training pairs; the alignment rule reads the stream again from its
    start, unless `scorers` holds the stream's scorer already (where it is kept once learnt)."""
    cleaner = Cleaner(
        stream.rules,
        settings,
        stream.cfg.src_lang,
        stream.cfg.tgt_lang,
        identifier,
        report,
        stream.label,
        head=lambda: iter_split(stream.cfg, "train") or (),
        alignment=None if scorers is None else scorers.get(stream.label),
    )
    if scorers is not None and cleaner.alignment is not None:
        scorers[stream.label] = cleaner.alignment
    return cleaner


def iter_training_rows(
    streams: Sequence[Stream],
    settings: CleanSettings,
    languages: Sequence[str],
    read: dict[str, int],
    report: CleaningReport,
    scorers: AlignmentScorers | None = None,
) -> Iterator[tuple]:
    """(source, target, *indices) rows of every stream, cleaned by its rules with data.clean_settings
    (`settings`; `languages`: what the language rule's identifier may answer); `read` receives each
    direction's pairs as read (before cleaning, for the check that none is empty), `report` each
    stream's cleaning; `scorers`: the alignment rule's, kept between passes (stream_cleaner). A
    reader's error names the stream it was reading."""
    identifier = identifier_for(languages, streams)
    for stream in streams:
        direction = stream.direction.name if stream.direction else SINGLE_CORPUS
        read.setdefault(direction, 0)
        try:
            cleaner = stream_cleaner(stream, settings, identifier, report, scorers)
            pairs = iter_split(stream.cfg, "train")
            for src, tgt in pairs if pairs is not None else ():  # None: require_every_direction names it
                read[direction] += 1
                if cleaner.keep(src, tgt):
                    yield (src, tgt, *stream.extra)
        except UserError as err:
            if stream.corpus is None and stream.direction is None:
                raise  # data.kind's one corpus in one direction: as the reader said it
            raise named_error(err, stream) from err
        cleaner.finish()


def named_error(err: UserError, stream: Stream) -> UserError:
    """A reader's error with the corpus entry and the direction it was reading."""
    parts = []
    if stream.corpus is not None:
        parts.append(f"data.corpora[{stream.corpus}]")
    if stream.direction is not None:
        parts.append(f"data.directions={stream.direction.name}")
    return UserError(f"{', '.join(parts)}: {err}")


def check_back_translations(streams: Sequence[Stream]) -> None:
    """A corpus of scripts/back_translate.py's pairs (its mark beside them) must be read as it was
    made: its translations as the sources, in this run's source language, of text in its target
    language. A corpus read the wrong way round, or made for other languages, is a one-line error.
    `streams`: the corpus plan's (seq2seq.data.corpus_plan)."""
    for stream in streams:
        one = stream.cfg
        if stream.corpus is None or one.kind != "parallel_files":
            continue
        for folder in dict.fromkeys((Path(one.train_src).parent, Path(one.train_tgt).parent)):
            mark = folder / BACK_TRANSLATION_MARK
            if not mark.is_file():
                continue
            made = json.loads(mark.read_text(encoding="utf-8"))
            if "src" not in made:  # written before the mark named its languages
                continue
            src, tgt = made["src"], made["tgt"]
            where = f"data.corpora[{stream.corpus}]"
            if Path(one.train_src) == folder / f"train.{tgt}" or Path(one.train_tgt) == folder / f"train.{src}":
                raise UserError(
                    f"{where}: reads {folder} the wrong way round: train.{src} holds the translations (sources) "
                    f"and train.{tgt} the real {tgt} text (targets), by {mark}"
                )
            if (one.src_lang, one.tgt_lang) != (src, tgt):
                raise UserError(
                    f"{where}: {folder} holds back-translations into {src} of {tgt} text (by {mark}), but this "
                    f"run translates {one.src_lang}-{one.tgt_lang}; back-translate {one.tgt_lang} text with a "
                    f"{one.tgt_lang}-{one.src_lang} model"
                )


DROPPED = None  # what a pass yields for a line it read and did not keep
BLOCK = 1024  # kept pairs a fraction's sample is drawn among at a time: the pairs held in memory
END = object()  # what a finished pass gives `next`
# The first pairs of each corpus judged by its rules before training (all of a shorter corpus): the
# tokenizer's head holds a corpus at its share of the mix, which for a small corpus beside a large one
# can be a line or two, too few to say that its rules drop every line.
CHECKED_PAIRS = 1000


def corpus_lines(stream: Stream) -> int:
    """The lines of a corpus's training file (its source side), counted as bytes a megabyte at a
    time: what its passes are spread over. A corpus without a file (hub) is counted by reading it."""
    try:
        files = split_files(stream.cfg, "train")
        if not files:
            return sum(1 for _ in iter_split(stream.cfg, "train") or ())
    except UserError as err:
        raise named_error(err, stream) from err
    return file_lines(Path(files[0])) or 0  # None: the reader names the file and what is wrong with it


def file_lines(path: Path) -> int | None:
    """The lines of a text file (.gz decompressed) as the readers split them, on b"\\n" (a last line
    without one counted), counted a megabyte at a time; None for a file that cannot be read."""
    lines, last = 0, b"\n"
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                lines, last = lines + chunk.count(b"\n"), chunk[-1:]
    except (OSError, EOFError, zlib.error):
        return None
    return lines + (last != b"\n")


def check_equal_sides(stream: Stream) -> None:
    """data.streaming: a corpus of two files (a source and a target side) whose lines differ in number is
    refused before training, in the reader's words. Read pair by pair, the shorter side's end would be
    met only at the end of the corpus's first pass, in the middle of the run."""
    try:
        files = split_files(stream.cfg, "train")
    except UserError as err:
        raise (err if stream.corpus is None and stream.direction is None else named_error(err, stream)) from err
    if len(files) != 2:
        return
    counts = [file_lines(Path(path)) for path in files]
    if None in counts or counts[0] == counts[1]:
        return  # a file that cannot be read: the reader names it and what is wrong with it, as it reads
    err = UserError(f"{files[0]} has {counts[0]} lines but {files[1]} has {counts[1]}: they must pair up")
    raise err if stream.corpus is None and stream.direction is None else named_error(err, stream)


def identifier_for(languages: Sequence[str], streams: Sequence[Stream]) -> Any:
    """The language rule's identifier, answering one of `languages`, when any stream's rules have it
    (loaded once for all)."""
    if not any("language" in stream.rules for stream in streams):
        return None
    try:
        return make_identifier(list(languages))
    except ImportError as err:
        raise UserError("data.clean: the language rule needs py3langid (pip install py3langid)") from err


def one_pass(
    settings: CleanSettings,
    stream: Stream,
    identifier: Any,
    report: CleaningReport,
    read: dict[str, int],
    scorers: AlignmentScorers | None = None,
) -> Iterator[tuple | None]:
    """A row, or DROPPED, for each line of one pass over a corpus, cleaned by a Cleaner of its own
    (`settings`: data.clean_settings; `scorers`: the alignment rule's, kept between passes)."""
    cleaner = stream_cleaner(stream, settings, identifier, report, scorers)
    pairs = iter(iter_split(stream.cfg, "train") or ())
    while True:
        # The yield stays outside the try: a pass left unfinished when the process ends is closed at the
        # yield, where an except clause would be looked up in a module already torn down.
        try:
            src, tgt = next(pairs)
        except StopIteration:
            break
        except UserError as err:
            raise named_error(err, stream) from err
        read[SINGLE_CORPUS] += 1
        yield (src, tgt, *stream.extra) if cleaner.keep(src, tgt) else DROPPED
    cleaner.finish()


def sampled(items: Iterator[tuple | None], fraction: float, rng: np.random.Generator) -> Iterator[tuple | None]:
    """`items` with floor(n x fraction + u) of their n rows kept (the others become DROPPED), drawn
    without replacement within each block of BLOCK rows."""
    u, rows, taken = rng.random(), 0, 0
    block: list[tuple] = []
    for item in chain(items, [END]):
        if item is DROPPED:  # by the rules: passed on at once (the interleave counts lines, not rows)
            yield DROPPED
            continue
        if item is not END:
            block.append(item)
            rows += 1
            if len(block) < BLOCK:
                continue
        now = math.floor(rows * fraction + u)
        chosen = set(rng.choice(len(block), size=now - taken, replace=False).tolist()) if block else set()
        taken = now
        yield from (row if i in chosen else DROPPED for i, row in enumerate(block))
        block = []


def passes(
    settings: CleanSettings,
    stream: Stream,
    weight: float,
    rng: np.random.Generator,
    identifier: Any,
    report: CleaningReport,
    read: dict[str, int],
    scorers: AlignmentScorers | None = None,
) -> Iterator[tuple | None]:
    """A row, or DROPPED, for each line the corpus's passes of one epoch read: floor(weight) whole
    passes, then the fraction's, sampled by `rng`."""
    whole, fraction = math.floor(weight), weight - math.floor(weight)
    for _ in range(whole):
        yield from one_pass(settings, stream, identifier, report, read, scorers)
    if fraction > 0:
        yield from sampled(one_pass(settings, stream, identifier, report, read, scorers), fraction, rng)


def interleave(sources: list[Iterator[tuple | None]], totals: list[int]) -> Iterator[tuple]:
    """The rows of `sources`, each line read from the source furthest behind in its `totals` (the lines
    it reads this epoch); ties go to the earlier source. A source that ends early drops out, one that
    reads more than its total (a file grown since it was counted) goes on last."""
    heap = [(0.0, index) for index in range(len(sources))]
    read = [0] * len(sources)
    while heap:
        _, index = heapq.heappop(heap)
        row = next(sources[index], END)
        if row is END:
            continue
        read[index] += 1
        heapq.heappush(heap, (read[index] / max(totals[index], 1), index))
        if row is not DROPPED:
            yield row


def mixed_rows(
    streams: Sequence[Stream],
    settings: CleanSettings,
    languages: Sequence[str],
    report: CleaningReport,
    read: dict[str, int],
    lines: Sequence[int],
    weights: Sequence[float] | None = None,
    rng: np.random.Generator | None = None,
    scorers: AlignmentScorers | None = None,
) -> Iterator[tuple]:
    """(source, target, corpus) rows of one epoch of data.corpora (`streams`: the corpus plan's, one a
    corpus), cleaned by their rules with data.clean_settings (`settings`; `languages`: what the language
    rule's identifier may answer), weighted and interleaved. `lines`: each corpus's lines (corpus_lines);
    `weights`: each corpus's, its passes' fraction sampled by `rng`. Without them, one pass of each
    corpus, unweighted: the head the tokenizer learns from, as the cached mode's learns from each kept
    pair once. `scorers`: the alignment rule's of each corpus, learnt at its first pass and kept there
    for every later one (this epoch's and, handed in again, the next epochs')."""
    identifier = identifier_for(languages, streams)
    read.setdefault(SINGLE_CORPUS, 0)
    weights = [float(weight) for weight in weights] if weights is not None else [1.0] * len(streams)
    rngs = (rng or np.random.default_rng(0)).spawn(len(streams))  # one a corpus: adding one leaves the others'
    sources = [
        passes(settings, stream, weight, each, identifier, report, read, scorers)
        for stream, weight, each in zip(streams, weights, rngs, strict=True)
    ]
    yield from interleave(sources, [n * math.ceil(w) for n, w in zip(lines, weights, strict=True)])


def refuse_emptied_corpora(
    streams: Sequence[Stream],
    settings: CleanSettings,
    languages: Sequence[str],
    head: CleaningReport,
    lines: Sequence[int],
    scorers: AlignmentScorers | None = None,
) -> None:
    """data.streaming with data.corpora, before training: a corpus whose rules dropped each of its first
    min(its lines, CHECKED_PAIRS) pairs is refused, with the counts. The tokenizer's `head` (its cleaning
    report) judged those of them it read; where it read fewer, the corpus's first pairs are judged again
    here, alone, with a report of their own (the head's stays what the tokenizer saw)."""
    identifier, loaded = None, False
    for stream, n in zip(streams, lines, strict=True):
        if not stream.rules:
            continue
        wanted = min(n, CHECKED_PAIRS)
        report = head.streams.get(stream.label)
        if report is None or report.read < wanted:
            if not loaded:
                identifier, loaded = identifier_for(languages, streams), True
            report = judged_head(settings, stream, identifier, wanted, scorers)
        refuse_emptied(stream.label, report, first=report.read < n)


def judged_head(
    settings: CleanSettings,
    stream: Stream,
    identifier: Any,
    pairs: int,
    scorers: AlignmentScorers | None = None,
) -> StreamReport:
    """The counts of a corpus's rules over its first `pairs` pairs, in a report of their own."""
    report = CleaningReport()
    deque(islice(one_pass(settings, stream, identifier, report, {SINGLE_CORPUS: 0}, scorers), pairs), maxlen=0)
    return report.stream(stream.label, stream.rules)
