"""data.clean's `alignment` rule: a pair whose sides do not translate each other, scored by word
translation tables learnt from the corpus itself (IBM Model 1, Brown et al. 1993), both ways.

No hard rule sees that a fluent German sentence translates another English one: the misaligned pairs
of a crawl pass every length, language and markup check. Bicleaner scores a pair with probabilistic
word dictionaries learnt from clean text; here the dictionaries are learnt, by IBM Model 1's EM, from
the first pairs of the corpus being cleaned (its noise included: a few per cent of noise barely moves
the table), so the rule needs no model or download. A pair's score is the mean, over its target words,
of log p(word | source sentence) under Model 1, averaged with the same the other way round. Aligned
pairs score close together; a misaligned one far below them. The cut is robust to the noise it looks for:
`alignment_max_mads` median absolute deviations (scaled to a standard deviation) below the median score
of the pairs learnt from.

Why not a library: eflomal and fast_align are C++ builds, not on PyPI for this platform, and align
words rather than score pairs; Model 1's EM over numpy arrays learns 50,000 pairs in seconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

WORD = re.compile(r"\w+")
NULL = 0  # each source sentence's empty word (Model 1 lets a target word come from nothing)
UNSEEN = 1e-7  # t(f | e) of a pair of words the table never saw together
MIN_PAIRS = 100  # fewer pairs than this teach the table nothing worth judging by
# The tables learn from pairs of at most this many words a side: a pair holds len(e) x len(f) entries
# while EM runs (an overlong crawl line of 1,000 words would hold a million), and long pairs teach
# Model 1 little. Longer pairs are still judged.
MAX_LEARN_WORDS = 80
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation in median absolute deviations


def words(text: str) -> list[str]:
    return WORD.findall(text.casefold())


@dataclass(frozen=True)
class TranslationTable:
    """t(f | e): the probability that source word e gives target word f, for every (e, f) that met in
    a pair; keys are e * len(target_ids) + f, sorted, beside their probabilities."""

    source_ids: dict[str, int]
    target_ids: dict[str, int]
    keys: np.ndarray
    probs: np.ndarray

    def log_likelihood(self, source: Sequence[str], target: Sequence[str]) -> float:
        """The mean over the target words of log(sum over e of t(f | e) / (len(source) + 1))."""
        e = np.array([NULL, *(self.source_ids.get(w, -1) for w in source)], dtype=np.int64)
        f = np.array([self.target_ids.get(w, -1) for w in target], dtype=np.int64)
        keys = (e[:, None] * len(self.target_ids) + f[None, :]).ravel()
        found = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        known = (self.keys[found] == keys) & (np.repeat(e, len(f)) >= 0) & (np.tile(f, len(e)) >= 0)
        t = np.where(known, self.probs[found], UNSEEN).reshape(len(e), len(f))
        return float(np.log(t.sum(axis=0) / len(e)).mean())


def learn_table(pairs: Sequence[tuple[list[str], list[str]]], iterations: int = 5) -> TranslationTable:
    """IBM Model 1's EM from uniform t: each target word's expected counts shared among its sentence's
    source words (NULL included) in proportion to t, then t renormalised per source word."""
    source_ids: dict[str, int] = {"": NULL}
    target_ids: dict[str, int] = {}
    e_all, f_all, position = [], [], []
    positions = 0
    for source, target in pairs:
        if not target:
            continue
        e = np.array([NULL, *(source_ids.setdefault(w, len(source_ids)) for w in source)], dtype=np.int64)
        f = np.array([target_ids.setdefault(w, len(target_ids)) for w in target], dtype=np.int64)
        e_all.append(np.tile(e, len(f)))  # every (source word, target position) of the pair
        f_all.append(np.repeat(f, len(e)))
        position.append(np.repeat(np.arange(positions, positions + len(f)), len(e)))
        positions += len(f)
    if not e_all:
        return TranslationTable(source_ids, target_ids, np.zeros(0, dtype=np.int64), np.zeros(0))
    e_flat, f_flat, j = np.concatenate(e_all), np.concatenate(f_all), np.concatenate(position)
    keys, entry = np.unique(e_flat * len(target_ids) + f_flat, return_inverse=True)
    source_of_key = keys // len(target_ids)
    t = np.ones(len(keys))
    for _ in range(iterations):
        weight = t[entry]
        share = weight / np.bincount(j, weights=weight, minlength=positions)[j]
        counts = np.bincount(entry, weights=share, minlength=len(keys))
        t = counts / np.bincount(source_of_key, weights=counts)[source_of_key]
    return TranslationTable(source_ids, target_ids, keys, t)


class AlignmentScorer:
    """Both ways' tables learnt from `pairs` (the head of one corpus) and the cut under which a pair is
    taken as misaligned. A head with fewer than MIN_PAIRS pairs to learn from teaches nothing to judge
    by: the scorer then judges no pair and says why in `not_judged` (the report's), so that a small
    corpus among several (an in-domain memory) trains under data.clean=default instead of stopping it."""

    def __init__(self, pairs: Iterable[tuple[str, str]], max_mads: float, label: str) -> None:
        tokenized = [(words(src), words(tgt)) for src, tgt in pairs]
        tokenized = [(s, t) for s, t in tokenized if 0 < len(s) <= MAX_LEARN_WORDS and 0 < len(t) <= MAX_LEARN_WORDS]
        self.not_judged: str | None = None
        self.cut: float | None = None
        if len(tokenized) < MIN_PAIRS:
            self.not_judged = (
                f"{label} has {len(tokenized)} pairs with 1 to {MAX_LEARN_WORDS} words on both sides to learn "
                f"word tables from, fewer than {MIN_PAIRS}: no pair of it was judged by this rule"
            )
            return
        self.forward = learn_table(tokenized)
        self.backward = learn_table([(t, s) for s, t in tokenized])
        scores = np.array([self._score(s, t) for s, t in tokenized])
        median = float(np.median(scores))
        spread = MAD_TO_SIGMA * float(np.median(np.abs(scores - median)))
        self.cut = median - max_mads * spread

    def _score(self, source: list[str], target: list[str]) -> float:
        return (self.forward.log_likelihood(source, target) + self.backward.log_likelihood(target, source)) / 2

    def score(self, src: str, tgt: str) -> float | None:
        """The pair's score, or None where a side has no word to judge it by or the corpus taught no
        tables (`not_judged`)."""
        source, target = words(src), words(tgt)
        if self.cut is None or not source or not target:
            return None
        return self._score(source, target)

    def misaligned(self, src: str, tgt: str) -> bool:
        score = self.score(src, tgt)
        return score is not None and score < self.cut
