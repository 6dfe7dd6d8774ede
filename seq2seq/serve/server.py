"""`serve(cfg)`, the work of `seq2seq-serve` on the config it has validated: read the API keys, check
that the models exist, bind the port, load the engine once, run the app on uvicorn until SIGTERM or
Ctrl-C, then finish the requests in flight and return.

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
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from seq2seq.artifacts.path_kind import check_named_models_exist
from seq2seq.config import UserError, serve_translate_config
from seq2seq.serve.app import Served, ServerInfo, Web, create_app
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.engine_thread import EngineThread
from seq2seq.serve.engines import Engines
from seq2seq.serve.requests import Limits
from seq2seq.serve.slow_requests import with_receive_deadline

log = logging.getLogger("seq2seq.serve")
SUMMARY_SECONDS = 60
# After the drain time, the requests refused then still need their answers written: uvicorn's own
# deadline (after which it cancels what is left, and a client would get no JSON) comes this much later.
ANSWER_SECONDS = 5


def serve(cfg: Any) -> None:
    """`cfg`: a ServeConfig that seq2seq-serve has validated (validate_serve)."""
    keys = read_keys(Path(cfg.api_keys_file)) if cfg.api_keys_file else None
    check_models_exist(cfg)  # a model not there is what the user typed wrong, not the port it would use
    listener = bind(cfg.host, cfg.port)
    engine_thread = EngineThread()  # every model's PyTorch work, on one thread (engine_thread.py)
    served = [_load(cfg, engine_thread)]  # the first model: run= (or checkpoint=), with source_lang/target_lang
    try:
        for run in cfg.runs:  # each further model has its own batcher and engines, on the same engine thread
            served.append(_load(_with_run(cfg, str(run)), engine_thread))
    except BaseException:
        _stop([model.batcher for model in served])
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
            _stop(batchers)
            log.info("stopped")

    limits = Limits(cfg.max_request_lines, cfg.max_line_chars, cfg.max_beam)
    files = tempfile.TemporaryDirectory(prefix="seq2seq-serve-files-")  # translated files, removed at exit
    web = Web(tuple(cfg.cors_origins), Path(files.name), cfg.max_file_bytes)
    app = create_app(served, limits, keys, lifespan, web)
    server = _Server(uvicorn_config(app, cfg.drain_seconds, cfg.receive_seconds))
    server.on_exit = lambda: [batcher.drain(cfg.drain_seconds) for batcher in batchers]
    # Logged once uvicorn listens: a client that reads this line can connect (the tests do).
    models = ", ".join(f"{m.info.model} ({m.info.engine}, {_pairs(m.info)})" for m in served)
    server.ready_message = f"serving {models} on http://{address[0]}:{address[1]}"
    try:
        server.run(sockets=[listener])
    finally:
        _stop(batchers)  # already stopped by the lifespan, unless uvicorn failed first
        engine_thread.stop()
        files.cleanup()
    if not server.started:
        raise UserError("the server did not start (see the log above)")


def uvicorn_config(app: Any, drain_seconds: float, receive_seconds: float) -> uvicorn.Config:
    """How uvicorn runs the app: our logging, the drain after SIGTERM, the deadline of a request that
    arrives too slowly (slow_requests.py)."""
    return uvicorn.Config(
        app,
        http=with_receive_deadline(receive_seconds),
        log_config=None,  # our logging (stderr), not uvicorn's
        access_log=False,  # one line per batch at debug and a summary per minute instead
        timeout_graceful_shutdown=drain_seconds + ANSWER_SECONDS,
        lifespan="on",
        loop="asyncio",  # not uvloop: after a graceful SIGTERM it still ended the process by the signal
    )


def _load(cfg: Any, engine_thread: EngineThread | None = None) -> Served:
    """One model's batcher, started: its engines loaded on `engine_thread` (None: one of its own)."""
    base = serve_translate_config(cfg)
    batcher = Batcher(lambda: Engines(base), base, cfg.max_batch_tokens, cfg.max_wait_ms, engine_thread)
    batcher.start()  # loads the model on the engine thread, the only one that runs PyTorch
    tags = batcher.engines.main.languages.tags
    if tags is not None:  # a multilingual model: each direction it was trained on, by its tag
        try:
            directions = tags.client_directions(cfg.source_lang, cfg.target_lang)  # NLLB's eng_Latn as en
        except UserError:
            batcher.stop()  # its thread and model go with the refusal
            raise
        source, target = directions[0].split("-")
        info = ServerInfo(str(cfg.run or cfg.checkpoint), batcher.engines.name, source, target, directions)
        return Served(batcher, base, info)
    model = batcher.engines.main.languages
    source, target = languages(cfg, model.src_lang, model.tgt_lang)
    return Served(batcher, base, ServerInfo(str(cfg.run or cfg.checkpoint), batcher.engines.name, source, target))


def _pairs(info: ServerInfo) -> str:
    directions = info.directions or (f"{info.source}-{info.target}",)
    return ", ".join(name.replace("-", " -> ") for name in directions)


def _with_run(cfg: Any, run: str) -> Any:
    """The server's settings for a further model: its run, and the languages its run says."""
    from omegaconf import OmegaConf

    return OmegaConf.merge(cfg, {"run": run, "checkpoint": None, "source_lang": None, "target_lang": None})


def _stop(batchers: list[Batcher]) -> None:
    """Each batcher stops; together they wait at most ANSWER_SECONDS for batches nobody waits for."""
    deadline = time.monotonic() + ANSWER_SECONDS
    for batcher in batchers:
        batcher.stop(timeout=max(0.0, deadline - time.monotonic()))


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


def check_models_exist(cfg: Any) -> None:
    """Each model named is there: checked before the port is bound, so that a run typed wrong is what
    the user hears of, not the default port being taken."""
    check_named_models_exist([cfg.run, *cfg.runs] if cfg.run else list(cfg.runs), cfg.checkpoint)


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


def languages(cfg: Any, recorded_source: str | None = None, recorded_target: str | None = None) -> tuple[str, str]:
    """source_lang/target_lang, else the languages the model itself records (its checkpoint's or
    export's data.src_lang/tgt_lang: a model served from anywhere, each of several models its own), else
    the data.src_lang/tgt_lang of the run's .hydra/config.yaml."""
    source, target = cfg.source_lang, cfg.target_lang
    if source and target:
        return source, target
    if recorded_source and recorded_target:
        return source or recorded_source, target or recorded_target
    candidates = []
    if cfg.run:
        candidates.append(Path(cfg.run))
    if cfg.checkpoint:
        found = Path(cfg.checkpoint)
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
