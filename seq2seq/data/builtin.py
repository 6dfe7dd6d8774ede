"""The built-in task: a translation problem generated in code, so training works with no download.

Reverse a sequence of letters and upper-case it: "c a t e" -> "E T A C". Every output token depends
on one input token at a position that moves with the sentence length, so the model has to learn an
anti-diagonal cross-attention (reordering), and the held-out split checks it generalises rather than
memorises: no held-out source appears in training.
"""

from __future__ import annotations

import random
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from seq2seq.config import DataConfig

# The task's data depends on its config only, never on the training seed: runs with different
# seeds train on the same data.
TASK_SEED = 20261122


def reverse_pair(source: str) -> str:
    return " ".join(reversed(source.upper().split()))


def reverse_task(data: DataConfig) -> dict[str, tuple[list[str], list[str]]]:
    rng = random.Random(TASK_SEED)
    letters = string.ascii_lowercase[: data.task_alphabet]
    sizes = {"valid": data.task_valid_size, "test": data.task_test_size, "train": data.task_train_size}
    seen: set[str] = set()
    corpus = {}
    for split, size in sizes.items():  # held-out splits first, so training can avoid them
        sources: list[str] = []
        attempts = 0
        while len(sources) < size and attempts < 20 * size:
            attempts += 1
            length = rng.randint(data.task_min_len, data.task_max_len)
            source = " ".join(rng.choice(letters) for _ in range(length))
            if source in seen:
                continue
            if split != "train":
                seen.add(source)
            sources.append(source)
        corpus[split] = (sources, [reverse_pair(s) for s in sources])
    return corpus
