"""The training pairs of a run, read from every corpus and every direction it names (data.corpora,
data.directions), each stream cleaned by its rules (seq2seq.data.cleaning) on the way.

Without data.corpora the run has one corpus, data.kind's training split, exactly as before the key
existed. With it, each entry is read by the bilingual readers of seq2seq.data.corpus as if it were
data.kind (its own kind and files), and each pair carries its corpus's index (the order of
data.corpora) in a `corpus` column, from the raw text through the cached token ids, so that an epoch
can show each corpus its weight's worth (epoch_mix.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config import CleanSettings, CorpusConfig, DataConfig, UserError
from seq2seq.data.alignment import AlignmentScorer
from seq2seq.data.cleaning import Cleaner, CleaningReport
from seq2seq.data.corpus import iter_split
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
    identifier = None
    if any("language" in stream.rules for stream in streams):
        try:
            identifier = make_identifier(list(languages))
        except ImportError as err:
            raise UserError("data.clean: the language rule needs py3langid (pip install py3langid)") from err
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
