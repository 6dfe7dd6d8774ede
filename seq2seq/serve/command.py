"""`serve(plan)`, the work of `seq2seq-serve` on the plan its command built (plan.py): read the API
keys, check that the models exist, bind the port, load the engine once, run the app on uvicorn until
SIGTERM or Ctrl-C, then finish the requests in flight and return.

The port is bound before the model loads, so a port in use is a one-line error at once, and the
socket is handed to uvicorn, so nothing can take the port in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from seq2seq.artifacts.path_kind import check_named_models_exist
from seq2seq.config import UserError
from seq2seq.serve.app import Served, ServerInfo, Web, create_app
from seq2seq.serve.batcher import Batcher, stop_all
from seq2seq.serve.engine_thread import EngineThread
from seq2seq.serve.engines import Engines
from seq2seq.serve.plan import ModelPlan, ServePlan
from seq2seq.serve.slow_requests import ANSWER_SECONDS, uvicorn_config

log = logging.getLogger("seq2seq.serve")
SUMMARY_SECONDS = 60


def serve(plan: ServePlan) -> None:
    """`plan`: what seq2seq-serve built of its config, validated (cli/serve.py)."""
    keys = read_keys(Path(plan.api_keys_file)) if plan.api_keys_file else None
    check_models_exist(plan)  # a model not there is what the user typed wrong, not the port it would use
    listener = bind(plan.host, plan.port)
    engine_thread = EngineThread()  # every model's PyTorch work, on one thread (engine_thread.py)
    first, *further = plan.models
    served = [_load(plan, first, engine_thread)]  # run= (or checkpoint=), with source_lang/target_lang
    try:
        for model in further:  # each further model has its own batcher and engines, on the same engine thread
            served.append(_load(plan, model, engine_thread))
    except BaseException:
        stop_all([model.batcher for model in served], ANSWER_SECONDS)
        engine_thread.stop()
        raise
    batchers = [model.batcher for model in served]
    address = listener.getsockname()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        summaries = [asyncio.create_task(_summaries(model.batcher, model.info)) for model in served]
        try:
            yield
        finally:
            for summary in summaries:
                summary.cancel()
            # uvicorn has waited for the requests in flight, each answered by the drain time at the latest.
            stop_all(batchers, ANSWER_SECONDS)
            log.info("stopped")

    drain = plan.drain_seconds
    files = tempfile.TemporaryDirectory(prefix="seq2seq-serve-files-")  # translated files, removed at exit
    web = Web(plan.cors_origins, Path(files.name), plan.max_file_bytes)
    app = create_app(served, plan.limits, keys, lifespan, web)
    server = _Server(uvicorn_config(app, drain, plan.receive_seconds))
    server.on_exit = lambda: [batcher.drain(drain) for batcher in batchers]
    # Logged once uvicorn listens: a client that reads this line can connect (the tests do).
    models = ", ".join(f"{m.info.model} ({m.info.engine}, {_pairs(m.info)})" for m in served)
    server.ready_message = f"serving {models} on http://{address[0]}:{address[1]}"
    try:
        server.run(sockets=[listener])
    finally:
        stop_all(batchers, ANSWER_SECONDS)  # already stopped by the lifespan, unless uvicorn failed first
        engine_thread.stop()
        files.cleanup()
    if not server.started:
        raise UserError("the server did not start (see the log above)")


def _load(plan: ServePlan, model: ModelPlan, engine_thread: EngineThread | None = None) -> Served:
    """One of the plan's models, its batcher started: its engines loaded on `engine_thread` (None: one
    of its own)."""
    job = model.job
    batcher = Batcher(lambda: Engines(job), job.settings, plan.max_batch_tokens, plan.max_wait_ms, engine_thread)
    batcher.start()  # loads the model on the engine thread, the only one that runs PyTorch
    name = str(job.model.run or job.model.checkpoint)  # the model as given
    tags = batcher.engines.main.languages.tags
    if tags is not None:  # a multilingual model: each direction it was trained on, by its tag
        try:
            directions = tags.client_directions(model.source_lang, model.target_lang)  # NLLB's eng_Latn as en
        except UserError:
            batcher.stop()  # its thread and model go with the refusal
            raise
        source, target = directions[0].split("-")
        info = ServerInfo(name, batcher.engines.name, source, target, directions)
        return Served(batcher, job.settings, info)
    own = batcher.engines.main.languages
    source, target = languages(model, own.src_lang, own.tgt_lang)
    return Served(batcher, job.settings, ServerInfo(name, batcher.engines.name, source, target))


def _pairs(info: ServerInfo) -> str:
    directions = info.directions or (f"{info.source}-{info.target}",)
    return ", ".join(name.replace("-", " -> ") for name in directions)


class _Server(uvicorn.Server):
    """uvicorn's Server, exiting 0 after a signal: uvicorn raises the signal again once it has shut
    down, which would end the process with 128 + the signal's number although it stopped as asked."""

    ready_message = "serving"
    on_exit: Any = None  # called at the first SIGTERM or Ctrl-C: the drain time starts

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.on_exit is not None:
            self.on_exit()
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            log.info("%s", self.ready_message)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


async def _summaries(batcher: Batcher, info: ServerInfo) -> None:
    while True:
        await asyncio.sleep(SUMMARY_SECONDS)
        if text := batcher.stats.summary():
            log.info("last minute, %s -> %s: %s", info.source, info.target, text)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (IPv4 or IPv6), or a one-line error naming the key."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as err:
        raise UserError(f"config error: host={host!r}: {err.strerror}") from err
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it a response
    # sent as two writes (headers, body) waits for the client's delayed ACK, tens of ms each request.
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart reuses the port at once
    try:
        listener.bind((host, port))
    except OSError as err:
        listener.close()
        if err.errno == errno.EADDRINUSE:
            raise UserError(
                f"config error: port={port}: already in use on {host} (another server? port=0 picks a free one)"
            ) from err
        raise UserError(f"config error: host={host!r} port={port}: cannot bind ({err.strerror or err})") from err
    listener.set_inheritable(True)
    return listener


def check_models_exist(plan: ServePlan) -> None:
    """Each model named is there: checked before the port is bound, so that a run typed wrong is what
    the user hears of, not the default port being taken."""
    check_named_models_exist([model.job.model.run for model in plan.models], plan.models[0].job.model.checkpoint)


def read_keys(path: Path) -> list[str]:
    """api_keys_file: one key per line (blank lines and # comments skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"api_keys_file={path}: cannot read it ({getattr(err, 'strerror', None) or err})") from err
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise UserError(f"api_keys_file={path}: holds no key (one key per line)")
    return keys


def languages(
    model: ModelPlan, recorded_source: str | None = None, recorded_target: str | None = None
) -> tuple[str, str]:
    """source_lang/target_lang, else the languages the model itself records (its checkpoint's or
    export's data.src_lang/tgt_lang: a model served from anywhere, each of several models its own), else
    the data.src_lang/tgt_lang of the run's .hydra/config.yaml."""
    source, target = model.source_lang, model.target_lang
    run, checkpoint = model.job.model.run, model.job.model.checkpoint
    if source and target:
        return source, target
    if recorded_source and recorded_target:
        return source or recorded_source, target or recorded_target
    candidates = []
    if run:
        candidates.append(Path(run))
    if checkpoint:
        found = Path(checkpoint)
        candidates += [found, found.parent, found.parent.parent]
    for directory in candidates:
        saved = directory / ".hydra" / "config.yaml"
        if saved.is_file():
            from omegaconf import OmegaConf

            data = OmegaConf.load(saved).get("data", {})
            return source or str(data.get("src_lang", "src")), target or str(data.get("tgt_lang", "tgt"))
    log.warning("no .hydra/config.yaml beside the model: languages %s -> %s (set source_lang, target_lang)",
                source or "src", target or "tgt")  # fmt: skip
    return source or "src", target or "tgt"
