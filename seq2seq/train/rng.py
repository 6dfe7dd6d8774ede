"""The random state of training: every generator a training step draws from (dropout masks, batch
order), saved in each checkpoint so that a resumed run draws exactly what the uninterrupted one did."""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def rng_state() -> dict[str, Any]:
    """Every random number generator a training step can draw from."""
    version, mt_state, gauss = random.getstate()
    np_state = np.random.get_state()
    return {
        "python": [version, list(mt_state), gauss],
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),  # the legacy normal sampler caches every second draw
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    version, mt_state, gauss = state["python"]
    random.setstate((version, tuple(mt_state), gauss))
    np_state = state["numpy"]
    keys = np_state["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, np_state["pos"], np_state["has_gauss"], np_state["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def restore_rank_state(states: list[dict[str, Any]], rank: int, world_size: int, seed: int) -> None:
    """A resumed rank continues its own random streams (dropout masks differ between ranks); a rank the
    checkpoint has none for starts from `seed` (seed + rank + update)."""
    if len(states) != world_size:
        log.warning(
            "the checkpoint has the random state of %d rank(s), this run has %d: ranks without one start "
            "from seed+rank+update, so the run is not bit-exact from here",
            len(states),
            world_size,
        )
    if rank < len(states):
        set_rng_state(states[rank])
    else:
        seed_everything(seed)
