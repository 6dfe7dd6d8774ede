"""The one thread that runs every PyTorch operation of the server, for all of its models.

GNU OpenMP gives each thread that starts parallel work a pool of its own, whose threads spin a while
after each parallel region; with one worker thread per model, two PyTorch models on one server had two
pools on the same cores. So every model's batcher gathers its own batches on a thread of its own and
hands the work to this thread: loading, decoding, attention maps, in the order asked (what it gained:
docs/performance.md, "Serving"). One model costs one hand-over per batch.

Between calls it checks whether other work has come to the machine (seq2seq/cpu_sharing.py,
SharingWatch): OpenMP's thread count is a setting of the thread that starts the parallel work, this one.
It imports no torch itself: a server of CTranslate2 models alone never loads PyTorch.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from seq2seq import cpu_sharing

log = logging.getLogger("seq2seq.serve")
T = TypeVar("T")


class EngineThread:
    """`call(work)` runs `work()` on the thread and returns what it returned (or raises what it raised)."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future, bool] | None] = queue.SimpleQueue()
        self._sharing: cpu_sharing.SharingWatch | None = None
        self._watching = False  # the sharing watch has been set up (it may be None: nothing to watch)
        self._thread = threading.Thread(target=self._run, name="seq2seq-serve-engine", daemon=True)
        self._thread.start()

    def call(self, work: Callable[[], T], between_batches: bool = True) -> T:
        """`between_batches`: whether to check for other work on the machine after it (not after a load)."""
        done: Future = Future()
        self._calls.put((work, done, between_batches))
        return done.result()

    def load(self, load: Callable[[], T]) -> T:
        """`call(load)`; the sharing watch is set up on the thread once PyTorch is there (see `_watch`)."""
        return self.call(load, between_batches=False)

    def stop(self) -> None:
        """Ends the thread after the calls already asked (it is a daemon: a call still running when the
        process exits does not hold it)."""
        self._calls.put(None)

    def _watch(self, result: T) -> T:  # after every call: a PyTorch engine may load on any of them
        """Sets up the sharing watch once a PyTorch engine has imported torch: the thread count it
        narrows is PyTorch's (a CTranslate2 engine fixes its threads when it loads). A server of
        CTranslate2 models alone never imports torch; one whose PyTorch engine loads on a later request
        starts watching then."""
        if not self._watching and "torch" in sys.modules:
            import torch

            self._sharing = cpu_sharing.watch_for_sharing(torch.get_num_threads(), torch.set_num_threads)
            self._watching = True
        return result

    def _run(self) -> None:
        while (item := self._calls.get()) is not None:
            work, done, between_batches = item
            try:
                result = self._watch(work())
            except BaseException as err:  # noqa: BLE001  (raised again on the caller's thread)
                done.set_exception(err)
                continue
            # Before the caller goes on, so that what it logs comes before what the caller does next.
            if between_batches and self._sharing is not None and (change := self._sharing.check()):
                log.info(change)
            done.set_result(result)
