"""data.clean: the rule-based filters crawled corpora need before training, as OpusFilter,
bicleaner-hardrules and Eole's `clean` transform have them (docs/corpora.md, "Cleaning").

A pair meets the rules in CLEAN_RULES' order (cheap ones first, the language identifier last) and is
dropped by the first that matches: each drop is counted under one rule, per stream (a corpus in a
direction), with a few dropped pairs kept as samples for the report. The duplicate rules keep one
8-byte hash per kept pair, never the text, so a corpus is cleaned as it streams by. Only the training
split is cleaned: validation and test are scored as given.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.config import CLEAN_RULES, UserError
from seq2seq.data.alignment import AlignmentScorer

URL_OR_MARKUP = re.compile(
    r"https?://|www\.\w|</?[A-Za-z][A-Za-z0-9]*(\s[^<>]*)?/?>|&(#\d+|#x[0-9A-Fa-f]+|[A-Za-z]+);|\[\[|\]\]|\{\{"
)
NOT_LETTERS = re.compile(r"[\W\d_]+")
# Unicode categories of characters no sentence needs: controls (Cc, tab included: it splits a TSV),
# unassigned (Cn), private use (Co), lone surrogates (Cs); and U+FFFD, the mark of a broken decoding.
NON_PRINTING = frozenset(("Cc", "Cn", "Co", "Cs"))
REPLACEMENT_CHARACTER = "\ufffd"


def normalised(text: str) -> str:
    """The letters of `text`, case-folded, one space between words: what near-duplicates and
    near-identical sides share (punctuation, digits, case and spacing aside)."""
    return " ".join(NOT_LETTERS.sub(" ", text.casefold()).split())


def pair_hash(*parts: str) -> int:
    return int.from_bytes(hashlib.blake2b("\t".join(parts).encode(), digest_size=8).digest(), "little")


class SeenHashes:
    """The 8-byte hashes of the pairs kept so far, at 8 bytes each in a sorted numpy array, and the
    newest in a Python set until `buffer` of them are merged into it: a set alone costs about nine
    times as much a hash (docs/corpora.md gives the memory)."""

    def __init__(self, buffer: int = 1 << 20) -> None:
        self.merged = np.zeros(0, dtype=np.uint64)
        self.recent: set[int] = set()
        self.buffer = buffer

    def __len__(self) -> int:
        return len(self.merged) + len(self.recent)

    def seen_or_add(self, key: int) -> bool:
        """True when `key` was added before; else adds it and returns False."""
        if key in self.recent:
            return True
        if len(self.merged):
            index = int(np.searchsorted(self.merged, np.uint64(key)))
            if index < len(self.merged) and int(self.merged[index]) == key:
                return True
        self.recent.add(key)
        if len(self.recent) >= self.buffer:
            self.merged = np.union1d(self.merged, np.fromiter(self.recent, dtype=np.uint64, count=len(self.recent)))
            self.recent = set()
        return False


def has_non_printing(text: str) -> bool:
    return REPLACEMENT_CHARACTER in text or any(unicodedata.category(char) in NON_PRINTING for char in text)


def letter_count(text: str) -> int:
    return sum(1 for char in text if char.isalpha())


def symbol_share(text: str) -> float:
    """The share of digits, punctuation and symbols among the characters that are not spaces."""
    visible = [char for char in text if not char.isspace()]
    if not visible:
        return 1.0
    return sum(1 for char in visible if not char.isalpha() and unicodedata.category(char)[0] in "NPS") / len(visible)


def visible_length(text: str) -> int:
    return sum(1 for char in text if not char.isspace())


@dataclass
class StreamReport:
    """What cleaning did to one stream: pairs read and kept, drops per rule, a few dropped pairs each."""

    read: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    samples: dict[str, list[list[str]]] = field(default_factory=dict)
    rules: tuple[str, ...] = ()
    not_judged: dict[str, str] = field(default_factory=dict)  # a rule that could not judge this stream: why

    def to_dict(self) -> dict[str, Any]:
        return {
            "rules": list(self.rules),
            "read": self.read,
            "kept": self.kept,
            "dropped": {rule: self.dropped[rule] for rule in self.rules},
            "not_judged": self.not_judged,
            "samples": self.samples,
        }


class CleaningReport:
    """Every stream's StreamReport, in reading order: cleaning.json, and the log's summary line."""

    def __init__(self) -> None:
        self.streams: dict[str, StreamReport] = {}

    def stream(self, label: str, rules: tuple[str, ...]) -> StreamReport:
        return self.streams.setdefault(label, StreamReport(rules=rules))

    def to_dict(self) -> dict[str, Any]:
        return {"streams": {label: report.to_dict() for label, report in self.streams.items()}}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def summary(report: dict[str, Any]) -> str:
    """One line for the log from a report's dict: each cleaned stream's kept/read and its drops per rule."""
    parts = []
    for label, stream in report["streams"].items():
        if not stream["rules"]:
            continue
        drops = ", ".join(f"{rule} {count:,}" for rule, count in stream["dropped"].items() if count)
        unjudged = "".join(f"; {rule} not judged: too few pairs" for rule in stream.get("not_judged", {}))
        parts.append(
            f"{label}: kept {stream['kept']:,} of {stream['read']:,}" + (f" ({drops})" if drops else "") + unjudged
        )
    return "; ".join(parts)


def refuse_emptied(label: str, report: StreamReport, first: bool = False) -> None:
    """A one-line UserError with the counts when the rules dropped every pair read of a stream; `first`:
    the pairs read are the head of the corpus (data.streaming's), not all of it."""
    if report.read and not report.kept:
        counts = ", ".join(f"{rule} {count:,}" for rule, count in report.dropped.items())
        which = "first " if first else ""
        raise UserError(
            f"data.clean: every one of the {which}{report.read:,} training pairs of {label} was dropped ({counts}); "
            "loosen data.clean_settings or leave those rules out"
        )


def refuse_emptied_head(report: CleaningReport) -> None:
    """data.streaming: the head the tokenizer learns from is all that is read before training; a corpus
    whose lines in it were all dropped is refused then, rather than at the end of its first pass."""
    for label, stream in report.streams.items():
        refuse_emptied(label, stream, first=True)


class Cleaner:
    """The rules of one stream, applied pair by pair (`keep`), counting into `report`'s entry."""

    def __init__(
        self,
        rules: tuple[str, ...],
        settings: Any,
        src_lang: str,
        tgt_lang: str,
        identifier: Any,
        report: CleaningReport,
        label: str,
        head: Callable[[], Iterable[tuple[str, str]]] | None = None,
        alignment: AlignmentScorer | None = None,
    ) -> None:
        """`head`: the stream's pairs from its start, read again for the alignment rule's word tables
        (its first `settings.alignment_pairs`) before any pair is judged. `alignment`: the scorer an
        earlier pass over the same stream learnt, judged by instead of learning it again (`head` is then
        not read); the Cleaner's own, learnt or given, is its `alignment`."""
        self.rules, self.settings, self.label = rules, settings, label
        self.langs = (src_lang, tgt_lang)
        self.identifier = identifier
        if "language" in rules and identifier is None:
            raise UserError(
                f"data.clean: the language rule knows none of {src_lang}, {tgt_lang} (py3langid's codes, e.g. en, de)"
            )
        self.report = report.stream(label, rules)
        self.seen = SeenHashes()  # exact pairs kept so far, by hash
        self.seen_normalised = SeenHashes()
        self.alignment = alignment if "alignment" in rules else None
        if "alignment" in rules and alignment is None:
            if head is None:
                raise UserError(f"data.clean: the alignment rule cannot reread {label} from its start")
            pairs = itertools.islice(head(), settings.alignment_pairs)
            self.alignment = AlignmentScorer(pairs, settings.alignment_max_mads, label)
        judged = set(rules)
        if self.alignment is not None and self.alignment.not_judged:
            self.report.not_judged["alignment"] = self.alignment.not_judged
            judged.discard("alignment")
        self.checks = [(rule, getattr(self, f"_{rule}")) for rule in CLEAN_RULES if rule in judged]

    def keep(self, src: str, tgt: str) -> bool:
        return self.reason(src, tgt) is None

    def reason(self, src: str, tgt: str) -> str | None:
        """The rule that drops the pair (counted, and sampled for the report), or None to keep it."""
        self.report.read += 1
        for rule, check in self.checks:
            if check(src, tgt):
                self.report.dropped[rule] += 1
                samples = self.report.samples.setdefault(rule, [])
                if len(samples) < self.settings.report_samples:
                    samples.append([src, tgt])
                return rule
        self.report.kept += 1
        return None

    def finish(self) -> None:
        """Refuses a stream that its rules emptied, before any training, with the counts."""
        refuse_emptied(self.label, self.report)

    def _control_chars(self, src: str, tgt: str) -> bool:
        return has_non_printing(src) or has_non_printing(tgt)

    def _length(self, src: str, tgt: str) -> bool:
        s = self.settings
        chars = (visible_length(src), visible_length(tgt))
        words = (len(src.split()), len(tgt.split()))
        return min(chars) < s.min_chars or max(chars) > s.max_chars or max(words) > s.max_words

    def _length_ratio(self, src: str, tgt: str) -> bool:
        s = self.settings
        chars = sorted((visible_length(src), visible_length(tgt)))
        words = sorted((len(src.split()), len(tgt.split())))
        if chars[1] < s.ratio_min_chars:  # "Ja." / "Yes, I do.": short lines differ by more without meaning it
            return False
        return chars[1] > s.max_char_ratio * max(chars[0], 1) or words[1] > s.max_word_ratio * max(words[0], 1)

    def _few_letters(self, src: str, tgt: str) -> bool:
        return letter_count(src) < self.settings.min_letters or letter_count(tgt) < self.settings.min_letters

    def _mostly_symbols(self, src: str, tgt: str) -> bool:
        limit = self.settings.max_symbol_share
        return symbol_share(src) > limit or symbol_share(tgt) > limit

    def _markup(self, src: str, tgt: str) -> bool:
        return URL_OR_MARKUP.search(src) is not None or URL_OR_MARKUP.search(tgt) is not None

    def _identical(self, src: str, tgt: str) -> bool:
        a, b = normalised(src), normalised(tgt)
        if a == b:
            return True
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        limit = self.settings.max_similarity
        # quick_ratio bounds ratio from above in linear time: most pairs stop there
        return matcher.real_quick_ratio() >= limit and matcher.quick_ratio() >= limit and matcher.ratio() >= limit

    def _duplicate(self, src: str, tgt: str) -> bool:
        return self.seen.seen_or_add(pair_hash(src, tgt))

    def _near_duplicate(self, src: str, tgt: str) -> bool:
        return self.seen_normalised.seen_or_add(pair_hash(normalised(src), normalised(tgt)))

    def _alignment(self, src: str, tgt: str) -> bool:
        return self.alignment.misaligned(src, tgt)

    def _language(self, src: str, tgt: str) -> bool:
        known = self.identifier.nb_classes
        shortest = self.settings.language_min_chars
        for text, lang in zip((src, tgt), self.langs, strict=True):
            if lang in known and len(text) >= shortest and self.identifier.classify(text)[0] != lang:
                return True
        return False
