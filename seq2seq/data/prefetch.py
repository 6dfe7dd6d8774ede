"""The next update's batches made on a background thread while the current update runs.

On a GPU the host's job is to keep the chip's queue full: time spent collating, pinning and copying
the next batches between two updates is time the queue drains. `Prefetcher` wraps a batch stream
(EpochBatches or StreamingBatches) and has the same interface; one update ahead, it collates the
batches and starts their copies to the device. What it reports of the stream (state_dict, epoch,
epochs_done) is the stream as the consumer has used it, not as far as the thread has read, so a
checkpoint taken while a batch waits resumes exactly at that batch.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import torch

from seq2seq.data.batching import Batch


class BatchStream(Protocol):
    epoch: int
    corpus_tally: Any  # a CorpusTally with data.corpora, else None

    def next_update(self, world_size: int, rank: int, accum_steps: int) -> list[Batch]: ...
    def epochs_done(self, world_size: int, accum_steps: int) -> int: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Prefetcher:
    def __init__(self, stream: BatchStream, device: torch.device, world_size: int, rank: int, accum_steps: int) -> None:
        self.stream, self.device = stream, device
        self.shape = (world_size, rank, accum_steps)  # one rank's updates: the same every call
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="seq2seq-batches")
        self._ahead: Future[list[Batch]] | None = None
        self._used: dict[str, Any] = {}  # the stream as consumed: what state_dict and friends report

    def __getattr__(self, name: str) -> Any:  # src_len, tgt_len, split...: the stream's own
        return getattr(self.stream, name)

    @property
    def epoch(self) -> int:
        return self._used["epoch"] if self._ahead is not None else self.stream.epoch

    @property
    def corpus_tally(self) -> Any:
        """data.corpora's counts as consumed, not as far as the thread has read."""
        return self._used["corpus_tally"] if self._ahead is not None else self.stream.corpus_tally

    def next_update(self, world_size: int, rank: int, accum_steps: int) -> list[Batch]:
        if (world_size, rank, accum_steps) != self.shape:
            raise ValueError(f"Prefetcher made for {self.shape}, asked for {(world_size, rank, accum_steps)}")
        batches = (self._ahead or self._fetch_ahead()).result()
        self._fetch_ahead()
        return batches

    def _fetch_ahead(self) -> Future[list[Batch]]:
        world_size, _, accum_steps = self.shape
        self._used = {
            "state": self.stream.state_dict(),
            "epoch": self.stream.epoch,
            "epochs_done": self.stream.epochs_done(world_size, accum_steps),
            "corpus_tally": tally.copy() if (tally := self.stream.corpus_tally) is not None else None,
        }
        self._ahead = self._thread.submit(self._make)
        return self._ahead

    def _make(self) -> list[Batch]:
        return [batch.to(self.device) for batch in self.stream.next_update(*self.shape)]

    def _drop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.result()
            self._ahead = None

    def epochs_done(self, world_size: int, accum_steps: int) -> int:
        if self._ahead is not None:
            return self._used["epochs_done"]
        return self.stream.epochs_done(world_size, accum_steps)

    def state_dict(self) -> dict[str, Any]:
        return self._used["state"] if self._ahead is not None else self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Repositions the stream; the batch read ahead from the old position is dropped."""
        self._drop_ahead()
        self.stream.load_state_dict(state)
