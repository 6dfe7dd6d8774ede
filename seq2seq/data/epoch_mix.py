"""What an epoch is made of: each corpus of data.corpora its weight's worth, then each direction of
data.directions its temperature share of the rows the weights make (docs/corpora.md, "Weights").

**Weights.** A corpus of n pairs at weight w gives floor(w) x n pairs to each epoch, every pair floor(w)
times, and round((w - floor(w)) x n) more, a sample without replacement drawn afresh each epoch from the
epoch's generator. Weight 3 is each pair three times an epoch; weight 0.25 a different quarter of the
corpus each epoch. So the counts are exact (not a rate that only holds on average, as a corpus drawn
batch by batch would give), every pair of an up-weighted corpus is seen alike. Why this rather than
Eole's round-robin or Marian's per-sentence loss weights: docs/corpora.md, "Weights".

**Temperature.** Direction d, with n_d training pairs, gets the share p_d = n_d^(1/T) / sum_e n_e^(1/T)
of every epoch (Arivazhagan et al. 2019; fairseq's and XLM-R's sampling): T = 1 keeps the data's
proportions, a larger T flattens them, so the smaller pairs are not drowned, and T = inf makes them
equal. An epoch keeps the size of the training data (sum of n_d pairs) and gives direction d its share,
rounded by largest remainder: a direction with fewer pairs than its share is repeated (every pair as
often, the rest drawn without replacement), a larger one is subsampled without replacement.

Counts are fixed and the rows drawn from the epoch's generator, so an epoch is a pure function of (seed,
epoch), as seq2seq.data.batching's resume needs. One module for both: batching composes an epoch from
the two in turn, and the log and TensorBoard count it by them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np


def showings(pairs: int, weight: float) -> int:
    """The rows a corpus of `pairs` pairs at `weight` gives an epoch."""
    whole = math.floor(weight)
    return whole * pairs + round((weight - whole) * pairs)


def epoch_counts_by_corpus(pairs: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Each corpus's rows in an epoch, from its kept pairs and its weight."""
    return np.asarray([showings(int(n), w) for n, w in zip(pairs, weights, strict=True)], dtype=np.int64)


def weighted_rows(corpora: np.ndarray, weights: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    """Row indices of one epoch: corpus c's rows (`corpora[i]` is row i's corpus) repeated floor(w_c)
    times, plus a sample of its rows for the fraction. Sorted by nothing: batching orders them."""
    chosen = []
    for corpus, weight in enumerate(weights):
        rows = np.flatnonzero(corpora == corpus)
        whole = math.floor(weight)
        chosen.extend([rows] * whole)
        extra = showings(len(rows), weight) - whole * len(rows)
        if extra:
            chosen.append(np.sort(rng.choice(rows, size=extra, replace=False)))
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def weighted_direction_counts(
    directions: np.ndarray, corpora: np.ndarray | None, weights: Sequence[float], names: int
) -> np.ndarray:
    """Each direction's rows as the weights make them (the counts its temperature share is taken of)."""
    if corpora is None:
        return np.bincount(directions, minlength=names).astype(np.float64)
    return np.bincount(directions, weights=np.asarray(weights, dtype=np.float64)[corpora], minlength=names)


@dataclass
class CorpusTally:
    """The rows each corpus has given the current epoch so far, counted from every rank's batches of
    each update as the stream hands them out (so the counts are the epoch's, whichever rank shows them),
    and the whole of the epoch before: what the log and TensorBoard show against the weights."""

    names: tuple[str, ...]
    epoch: int = 1
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    finished: tuple[int, np.ndarray] | None = None  # (epoch, its rows per corpus): the last epoch ended

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.names):
            self.rows = np.zeros(len(self.names), dtype=np.int64)

    def add(self, epoch: int, corpora: np.ndarray) -> None:
        """`corpora`: the corpus index of each row an update of `epoch` hands out (every rank's)."""
        if epoch != self.epoch:
            self.finished = (self.epoch, self.rows)
            self.epoch, self.rows = epoch, np.zeros(len(self.names), dtype=np.int64)
        self.rows = self.rows + np.bincount(corpora, minlength=len(self.names))

    def copy(self) -> CorpusTally:
        return replace(self, rows=self.rows.copy())


def direction_shares(counts: list[int], temperature: float) -> np.ndarray:
    """p_d proportional to n_d^(1/T); a direction without pairs gets none."""
    counts_array = np.asarray(counts, dtype=np.float64)
    exponent = 0.0 if math.isinf(temperature) else 1.0 / temperature
    weights = np.where(counts_array > 0, counts_array**exponent, 0.0)
    return weights / weights.sum()


def epoch_counts(shares: np.ndarray, total: int) -> np.ndarray:
    """`total` rows split by `shares`, each count within one of total x share (largest remainder)."""
    exact = shares * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def epoch_rows(directions: np.ndarray, shares: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row indices of one epoch: direction d's rows (`directions[i]` is row i's direction) repeated or
    subsampled to its share of len(directions) rows. Sorted by nothing: batching orders them."""
    counts = epoch_counts(shares, len(directions))
    chosen = []
    for direction, wanted in enumerate(counts):
        rows = np.flatnonzero(directions == direction)
        if wanted == 0 or len(rows) == 0:
            continue
        whole, rest = divmod(int(wanted), len(rows))
        chosen.extend([rows] * whole)
        chosen.append(np.sort(rng.choice(rows, size=rest, replace=False)))
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
