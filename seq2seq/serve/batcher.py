"""Dynamic batching: one thread per model gathers its batches; the requests that arrive while the engine
is busy, or within `max_wait_ms` of the oldest waiting one (or of the engine becoming free), are
decoded as one batch. It waits only while a request the server has received is not yet in the queue,
or while the clients it has just answered have not sent their next request (a client that sends one
line at a time comes back at once: without waiting for it, 32 such clients split into two groups
that took turns), so a lone request does not wait.

The engine sorts the batch's lines by length and decodes them `batch_size` at a time (as
seq2seq-translate does a chunk), so many small requests cost about what one file of their lines
costs. Each request gets its own lines back, in its order. Requests with other settings (beam,
n-best, ...) wait for a batch of their own; a sampled request is always decoded alone.

A batch that fails is decoded again request by request, so a line that breaks the model fails only
the request that sent it.

The engines are loaded and run on the server's one engine thread (engine_thread.py), which every
model's batcher shares, so that all PyTorch work of the server is one OpenMP pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.translator_api import Translation, encode_sources
from seq2seq.serve.engine_thread import EngineThread
from seq2seq.serve.engines import Engines

log = logging.getLogger("seq2seq.serve")
_ids = itertools.count()


class ShuttingDown(Exception):
    """A request that came after the server began to stop (answered 503)."""


@dataclass(eq=False)  # a job is itself: compared by identity
class Job:
    """One request's lines (or, with `work`, a function to run on the engine alone)."""

    lines: list[str]
    prefixes: list[str] | None
    settings: DecodingSettings | None
    sources: list[list[int]]  # each line's source ids (translator_api.encode_sources), tokenized once, here
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    work: Callable[[Engines], Any] | None = None
    arrived: float = field(default_factory=time.monotonic)
    key: Any = None
    alone: bool = False
    tokens: int = field(init=False)  # what counts against max_batch_tokens: the sources' tokens, </s> included

    def __post_init__(self) -> None:
        self.tokens = sum(len(ids) + 1 for ids in self.sources)
        self.alone = self.work is not None or (self.settings is not None and self.settings.sampling)
        self.key = ("alone", next(_ids)) if self.alone else self.settings

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        def settle() -> None:
            if self.future.done():  # the client went away (the request was cancelled)
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the event loop has closed (the server stopped during the drain): nobody waits
            pass


class Batcher:
    """The worker: `submit` from the event loop, `start` and `stop` around the server's life. Without an
    `engine_thread` (one model) it starts one of its own, and stops it when it stops."""

    def __init__(
        self,
        load_engines: Callable[[], Engines],
        settings: DecodingSettings,
        max_batch_tokens: int,
        max_wait_ms: float,
        engine_thread: EngineThread | None = None,
    ) -> None:
        self._load_engines = load_engines
        self._owns_engine_thread = engine_thread is None
        self._engine_thread = engine_thread  # None: start() starts one of its own
        self.engines: Engines  # set by start(), loaded on the engine thread
        self.settings = settings  # the model's own: what /translate decodes with
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait_ms / 1000
        self._pending: list[Job] = []
        self._wake = threading.Condition()
        self._stopping = False
        self.drain_deadline: float | None = None  # after SIGTERM: when requests still waiting are refused
        self._in_flight = 0  # requests being read, checked or decoded (see `receiving`)
        self._free_since = 0.0  # when the engine finished its last batch
        self._answered = 0  # requests that batch answered ...
        self._returned = 0  # ... and requests queued since then
        self._thread = threading.Thread(target=self._run, name="seq2seq-serve-batcher", daemon=True)
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self.stats = Stats()

    def start(self) -> None:
        """Starts the worker, which loads the engines; returns once they are loaded, or raises what
        loading raised (a bad model path is the server's one-line error at start)."""
        if self._engine_thread is None:
            self._engine_thread = EngineThread()
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            self._thread.join()
            if self._owns_engine_thread:
                self._engine_thread.stop()
            raise self._load_error

    def drain(self, seconds: float) -> None:
        """SIGTERM: the requests in flight have `seconds` to be answered; those still waiting then
        are refused (see Service.unless_gone), and their jobs dropped unless already being decoded."""
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic() + seconds

    def stop(self, timeout: float | None = None) -> None:
        """Decodes what is waiting, then ends the worker; gives up waiting for it after `timeout`
        (a batch nobody waits for any more may still be decoding: the thread is a daemon)."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("stopped while a batch nobody waits for was still decoding")
        if self._owns_engine_thread and self._engine_thread is not None:
            self._engine_thread.stop()

    @contextlib.contextmanager
    def receiving(self) -> Iterator[None]:
        """Around a request's whole handling: a batch waits up to max_wait_ms only for requests that
        have arrived and may still join it, so a lone request is decoded at once."""
        with self._wake:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._wake:
                self._in_flight -= 1
                self._wake.notify()

    async def translate(
        self, lines: list[str], settings: DecodingSettings, prefixes: list[str] | None = None
    ) -> list[list[Translation]]:
        # Which engine decodes `settings` is chosen on the worker (choosing may load or time one): a
        # forced engine that cannot decode them fails the batch, then each of its requests alone.
        sources = encode_sources(self.engines.main, lines, settings.tgt_lang, src_lang=settings.src_lang)
        return await self._submit(lines, prefixes, settings, sources, None)

    async def run_alone(self, work: Callable[[Engines], Any]) -> Any:
        """`work(engines)` in the worker, between batches (an engine is not thread-safe)."""
        return await self._submit([], None, None, [], work)

    async def _submit(
        self,
        lines: list[str],
        prefixes: list[str] | None,
        settings: DecodingSettings | None,
        sources: list[list[int]],
        work: Any,
    ) -> Any:
        loop = asyncio.get_running_loop()
        job = Job(lines, prefixes, settings, sources, loop.create_future(), loop, work)
        with self._wake:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            self._pending.append(job)
            self._returned += 1
            self._wake.notify()
        return await job.future

    def _run(self) -> None:
        try:
            self.engines = self._engine_thread.load(self._load_engines)
        except BaseException as err:  # noqa: BLE001  (start() raises it on the caller's thread)
            self._load_error = err
            return
        finally:
            self._loaded.set()
        while True:
            batch = self._gather()
            if batch is None:
                return
            with self._wake:  # counted from the batch's start: its clients cannot come back before it ends
                self._answered, self._returned = len(batch), 0
            self._decode(batch)
            with self._wake:
                self._free_since = time.monotonic()

    def _gather(self) -> list[Job] | None:
        """The next batch: the oldest job and those with its settings that fit max_batch_tokens,
        after waiting until the batch is full or the oldest has waited max_wait_ms (counted from when
        the engine became free, for a request that arrived while it was busy)."""
        with self._wake:
            while not self._pending:
                if self._stopping:
                    return None
                self._wake.wait()
            while not self._stopping:
                first = self._pending[0]
                alike = [job for job in self._pending if job.key == first.key]
                left = max(first.arrived, self._free_since) + self.max_wait - time.monotonic()
                full = sum(j.tokens for j in alike) >= self.max_batch_tokens
                # Every request the server holds is waiting here, and every client the last batch
                # answered has sent its next one: none is about to join, decode now.
                nobody_coming = len(self._pending) >= self._in_flight and self._returned >= self._answered
                if left <= 0 or full or first.alone or nobody_coming:
                    break
                self._wake.wait(left)
            first = self._pending[0]
            batch, tokens = [], 0
            for job in self._pending:
                if job.key == first.key and (not batch or tokens + job.tokens <= self.max_batch_tokens):
                    batch.append(job)
                    tokens += job.tokens
            self._pending = [job for job in self._pending if job not in batch]
            return batch

    def _decode(self, batch: list[Job]) -> None:
        live = [job for job in batch if not job.future.done()]  # a cancelled request costs no decoding
        if not live:
            return
        if live[0].work is not None:
            self._run_work(live[0])
            return
        start = time.monotonic()
        try:
            lines = [line for job in live for line in job.lines]
            results = self._engine_thread.call(lambda: self._translate(lines, live))
        except Exception:  # noqa: BLE001  (one request's line broke the batch: find whose, fail it alone)
            for job in live:
                self._decode_alone(job)
            return
        offset = 0
        for job in live:
            job.finish(results[offset : offset + len(job.lines)])
            offset += len(job.lines)
        seconds = time.monotonic() - start
        self.stats.add(len(live), offset, start - min(job.arrived for job in live), seconds)
        log.debug(
            "batch: %d requests, %d lines, waited %.1f ms, decoded in %.1f ms",
            len(live), offset, 1000 * (start - live[0].arrived), 1000 * seconds,
        )  # fmt: skip

    def _translate(self, lines: list[str], jobs: list[Job]) -> list[list[Translation]]:
        settings = jobs[0].settings
        engine = self.engines.for_settings(settings).decoding_with(settings)  # a view: the engine stays as it is
        prefixes = [prefix for job in jobs for prefix in job.prefixes] if settings.prefix else None
        sources = [ids for job in jobs for ids in job.sources]
        return engine.translate_nbest(lines, prefixes, sources=sources)

    def _decode_alone(self, job: Job) -> None:
        try:
            job.finish(self._engine_thread.call(lambda: self._translate(job.lines, [job])))
        except Exception as err:  # noqa: BLE001  (reported to that request only)
            log.warning("a request failed: %s", str(err).splitlines()[0] if str(err) else type(err).__name__)
            job.finish(error=err)

    def _run_work(self, job: Job) -> None:
        try:
            job.finish(self._engine_thread.call(lambda: job.work(self.engines)))
        except Exception as err:  # noqa: BLE001
            job.finish(error=err)


def stop_all(batchers: list[Batcher], timeout: float) -> None:
    """Each batcher stops; together they wait at most `timeout` for batches nobody waits for."""
    deadline = time.monotonic() + timeout
    for batcher in batchers:
        batcher.stop(timeout=max(0.0, deadline - time.monotonic()))


class Stats:
    """Requests, lines and times since the last summary (logged once a minute at info)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.batches = self.requests = self.lines = 0
        self.waited = self.decoding = 0.0

    def add(self, requests: int, lines: int, waited: float, decoding: float) -> None:
        with self._lock:
            self.batches += 1
            self.requests += requests
            self.lines += lines
            self.waited += waited
            self.decoding += decoding

    def summary(self) -> str | None:
        with self._lock:
            if not self.batches:
                return None
            text = (
                f"{self.requests} requests, {self.lines} lines in {self.batches} batches "
                f"({self.lines / self.batches:.1f} lines a batch), {self.decoding:.1f} s decoding"
            )
            self.reset()
            return text
