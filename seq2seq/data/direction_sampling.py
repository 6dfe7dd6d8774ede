"""How often each direction of a multilingual run is trained on: temperature sampling.

Direction d, with n_d training pairs, gets the share p_d = n_d^(1/T) / sum_e n_e^(1/T) of every epoch
(Arivazhagan et al. 2019; fairseq's and XLM-R's sampling): T = 1 keeps the data's proportions, a
larger T flattens them, so the smaller pairs are not drowned, and T = inf makes them equal.

An epoch keeps the size of the training data (sum of n_d pairs) and gives direction d its share,
rounded by largest remainder: a direction with fewer pairs than its share is repeated (every pair as
often, the rest drawn without replacement), a larger one is subsampled without replacement. Counts
are fixed and the rows drawn from the epoch's generator, so an epoch is a pure function of (seed,
epoch), as seq2seq.data.batching's resume needs.
"""

from __future__ import annotations

import math

import numpy as np


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
