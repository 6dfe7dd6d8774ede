"""The Starlette app: LibreTranslate's routes (libretranslate.py), `GET /health` (LibreTranslate's
`{"status": "ok"}`), the native `GET /v1/info`, `POST /v1/translate` and `POST /v1/attention`
(native.py), and the page at `GET /`.

Every answer to a bad request is JSON `{"error": "<one line>"}` with 400, 413 (too much), 403 (no
valid API key), 404 (no such route), 405 (a method the route does not take) or 503 (shutting down);
nothing of such a request reaches the engine, so it cannot hurt another request. Browsers on other
origins may call it (CORS, `cors_origins`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.resources
import json
import logging
import shutil
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from seq2seq.config import UserError
from seq2seq.inference.settings import DecodingSettings
from seq2seq.serve.batcher import Batcher, ShuttingDown
from seq2seq.serve.languages import Languages, Model
from seq2seq.serve.libretranslate import LibreTranslate
from seq2seq.serve.native import NativeApi
from seq2seq.serve.requests import BadRequest, Limits
from seq2seq.serve.service import ClientGone, Service
from seq2seq.serve.spec import spec

log = logging.getLogger("seq2seq.serve")


@dataclass(frozen=True)
class ServerInfo:
    model: str  # the run (or checkpoint) the server decodes with, as given
    engine: str  # "PyTorch" or "CTranslate2"
    source: str  # language codes (a multilingual model's: its first direction's)
    target: str
    directions: tuple[str, ...] = ()  # a multilingual model's, "en-de", ...; () for one direction


@dataclass(frozen=True)
class Web:
    """How the server meets the web: which origins' pages may call it, where translated files go."""

    cors_origins: tuple[str, ...] = ("*",)
    # The caller's folder (written into, never removed); None: the app makes a temporary one, its own,
    # and removes it when it stops, or when it goes (at exit at the latest) if it never started.
    files_dir: Path | None = None
    max_file_bytes: int = 5_000_000


@dataclass(frozen=True)
class Served:
    """One model behind the server: its batcher (which owns its engines) and the settings it decodes with
    (its job's: what /translate decodes with, and what a /v1/translate request changes)."""

    batcher: Batcher
    settings: DecodingSettings
    info: ServerInfo


def _models(served: Served) -> list[Model]:
    """The routes a served model gives: its pair, or each direction of a multilingual model."""
    info = served.info
    if not info.directions:
        return [Model(info.model, info.source, info.target, served.batcher)]
    return [Model(info.model, *name.split("-"), served.batcher, tagged=True) for name in info.directions]


def create_app(
    served: list[Served],
    limits: Limits,
    keys: list[str] | None,
    lifespan: Any = None,
    web: Web | None = None,
) -> Starlette:
    """The app over one model or several (the first is the page's and /v1's default)."""
    web = web or Web()
    first = served[0]
    info = first.info
    defaults = first.settings
    service = Service([model.batcher for model in served], limits, keys)
    languages = Languages([model for m in served for model in _models(m)])
    owned = None if web.files_dir else _temporary_folder()
    files_dir = web.files_dir or owned
    libre = LibreTranslate(service, languages, defaults, files_dir, web.max_file_bytes)
    native = NativeApi(served, service, languages, limits)

    async def health(request: Request) -> Response:  # exactly LibreTranslate's: clients compare it whole
        return JSONResponse({"status": "ok"})

    async def server_info(request: Request) -> Response:
        models = [m.info.__dict__ for m in served]
        return JSONResponse({**info.__dict__, "models": models, "api_key_required": keys is not None})

    async def api_spec(request: Request) -> Response:
        return JSONResponse(spec(importlib.metadata.version("seq2seq")))

    page = _page({
        "models": [{"model": m.info.model, "engine": m.info.engine} for m in served],
        "max_request_lines": limits.max_request_lines,
        "max_beam": limits.max_beam,
        "max_file_bytes": web.max_file_bytes,
    })  # fmt: skip

    async def home(request: Request) -> Response:
        return HTMLResponse(page)

    guarded = functools.partial(_answering_errors, service=service)

    routes = [
        Route("/", home),
        Route("/health", health),
        Route("/v1/info", server_info),
        Route("/spec", api_spec),
        Route("/languages", libre.languages_list),
        Route("/frontend/settings", libre.frontend_settings),
        Route("/translate", guarded(libre.translate), methods=["POST"]),
        Route("/detect", guarded(libre.detect), methods=["POST"]),
        Route("/translate_file", guarded(libre.translate_file), methods=["POST"]),
        Route("/download_file/{filename}", guarded(libre.download_file), name="download_file"),
        Route("/v1/translate", guarded(native.translate), methods=["POST"]),
        Route("/v1/attention", guarded(native.attention), methods=["POST"]),
    ]
    # LibreTranslate's CORS headers (its after_request): any origin unless cors_origins says otherwise.
    cors = Middleware(
        CORSMiddleware,
        allow_origins=list(web.cors_origins),
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type"],
        expose_headers=["Authorization"],
        max_age=60 * 60 * 24 * 20,
    )
    errors = {HTTPException: _http_error, Exception: _server_error}
    if owned is not None:
        lifespan = _holding(owned, lifespan)
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[cors], exception_handlers=errors)
    if owned is not None:  # an app made and dropped without serving leaves nothing either
        weakref.finalize(app, shutil.rmtree, owned, True)
    return app


def _holding(folder: Path, lifespan: Any) -> Callable[[Any], contextlib.AbstractAsyncContextManager]:
    """`lifespan` (None: none), with the app's own files folder there while it serves and gone after."""

    @contextlib.asynccontextmanager
    async def held(app: Any) -> AsyncIterator[Any]:
        folder.mkdir(parents=True, exist_ok=True)  # again, if the app is served a second time
        try:
            if lifespan is None:
                yield None
            else:
                async with lifespan(app) as state:
                    yield state
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return held


def _page(server: dict[str, Any]) -> str:
    """page.html with what the server is (its models and engines) and the limits that /frontend/settings
    does not give (lines a request, the beam, a file's bytes) written in; the page reads the rest
    (languages, the key, the characters a line) from the LibreTranslate routes its clients read."""
    page = importlib.resources.files("seq2seq.serve").joinpath("page.html").read_text(encoding="utf-8")
    return page.replace("{{SERVER}}", json.dumps(server).replace("</", "<\\/"))  # JSON in a <script>: no "</"


def _temporary_folder() -> Path:
    import tempfile

    return Path(tempfile.mkdtemp(prefix="seq2seq-serve-files-"))


async def _http_error(request: Request, err: Exception) -> Response:
    """Starlette's own refusals (no such route: 404, a method the route does not take: 405, a form
    it cannot parse: 400) as JSON, like every other error; 405 keeps its Allow header."""
    assert isinstance(err, HTTPException)
    detail = err.detail
    if err.status_code == 404:
        detail = f"no route {request.url.path} (see GET /spec)"
    elif err.status_code == 405:
        allowed = (err.headers or {}).get("Allow", "")
        detail = f"{request.method} is not allowed on {request.url.path}: use {allowed}"
    return JSONResponse({"error": detail}, status_code=err.status_code, headers=err.headers)


async def _server_error(request: Request, err: Exception) -> Response:
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    log.warning("request failed: %s", message)
    return JSONResponse({"error": f"internal error: {message}"}, status_code=500)


def _answering_errors(handler: Callable[[Request], Any], service: Service) -> Callable[[Request], Any]:
    """A bad request is its status and one line of JSON; a request that breaks the engine, 500 for
    that request alone (the batcher has decoded the others without it)."""

    async def guarded(request: Request) -> Response:
        try:
            with service.receiving():
                return await handler(request)
        except BadRequest as err:
            return JSONResponse({"error": str(err)}, status_code=err.status)
        except ClientGone:
            log.debug("a client went away before its answer: its lines were not decoded")
            return Response(status_code=499)  # nobody reads it (nginx's code for a closed request)
        except ClientDisconnect:  # its body never came whole: closed by the deadline (slow_requests.py) or by it
            log.debug("a client went away before its request had arrived")
            return Response(status_code=499)
        except ShuttingDown as err:
            return JSONResponse({"error": str(err)}, status_code=503)
        except UserError as err:  # e.g. a prefix longer than the model's positions
            return JSONResponse({"error": str(err)}, status_code=400)
        except HTTPException:  # Starlette's own (a form it cannot parse): _http_error answers it
            raise
        except Exception as err:  # noqa: BLE001
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("request failed: %s", message)
            return JSONResponse({"error": f"Cannot translate text: {message}"}, status_code=500)  # LibreTranslate's

    return guarded
