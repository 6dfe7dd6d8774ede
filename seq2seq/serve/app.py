"""The Starlette app: LibreTranslate's routes (libretranslate.py), `GET /health` (LibreTranslate's
`{"status": "ok"}`), the native `GET /v1/info`, `POST /v1/translate` and `POST /v1/attention`, and the
page at `GET /`.

Every answer to a bad request is JSON `{"error": "<one line>"}` with 400, 413 (too much), 403 (no
valid API key), 404 (no such route), 405 (a method the route does not take) or 503 (shutting down);
nothing of such a request reaches the engine, so it cannot hurt another request. Browsers on other
origins may call it (CORS, `cors_origins`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from seq2seq.config import TranslateConfig, UserError
from seq2seq.serve.attention import cross_attention
from seq2seq.serve.batcher import Batcher, ShuttingDown
from seq2seq.serve.languages import Languages, Model
from seq2seq.serve.libretranslate import LibreTranslate
from seq2seq.serve.requests import NATIVE_KEYS, BadRequest, Limits, lines_of
from seq2seq.serve.service import ClientGone, Service
from seq2seq.serve.settings import default_settings, settings_from_request
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
    files_dir: Path | None = None  # a folder the server made (and removes); None: a new temporary one
    max_file_bytes: int = 5_000_000


@dataclass(frozen=True)
class Served:
    """One model behind the server: its batcher (which owns its engines) and the settings it decodes with."""

    batcher: Batcher
    base: TranslateConfig
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
    defaults = default_settings(first.base)
    service = Service([model.batcher for model in served], limits, keys)
    languages = Languages([model for m in served for model in _models(m)])
    by_batcher = {id(model.batcher): model for model in served}
    files_dir = web.files_dir or _temporary_folder()
    libre = LibreTranslate(service, languages, defaults, files_dir, web.max_file_bytes)

    def one_route(body: dict[str, Any], what: str) -> tuple[Served, Model]:
        """/v1's routes decode with one model (n-best scores, prefixes and attention are one model's):
        the model a request goes to, and which of its directions."""
        if len(languages.models) == 1 and "source" not in body and "target" not in body:
            return first, languages.models[0]
        route = languages.route_of({"target": first.info.target, **body} if not first.info.directions else body)
        if len(route.models) > 1:
            raise BadRequest(f"{route.source} -> {route.target} goes through {route.models[0].target}: "
                             f"{what} decodes with one model; use /translate")  # fmt: skip
        return by_batcher[id(route.models[0].decoder)], route.models[0]

    async def native(request: Request) -> Response:
        body = await service.params(request, NATIVE_KEYS)
        texts, listed = lines_of(body, "q", limits)
        for index, text in enumerate(texts):  # n-best lists and prefixes are per line, as in seq2seq-translate
            if "\n" in text:
                raise BadRequest(
                    f"{f'q[{index}]' if listed else 'q'} holds a newline: /v1/translate takes one line a string"
                )
        model, direction = one_route(body, "/v1/translate")
        prefixes = _prefixes(body, len(texts), listed)
        vocabulary = model.batcher.engines.tokenizers.tgt.get_vocab_size()
        try:
            settings = settings_from_request(body, model.base, vocabulary, prefixes is not None, limits.max_beam)
        except UserError as err:
            raise BadRequest(str(err)) from err
        results = await service.decode(request, model.batcher, texts, direction.settings(settings), prefixes)
        nbest = [[{"text": t.text, "score": t.score} for t in hyps] for hyps in results]
        translated = [hyps[0].text for hyps in results]
        answer = {"translatedText": translated, "nbest": nbest}
        return JSONResponse(answer if listed else {key: value[0] for key, value in answer.items()})

    async def attention_map(request: Request) -> Response:
        body = await service.params(request, ("q", "api_key", "source", "target"))
        texts, listed = lines_of(body, "q", limits)
        if listed or "\n" in texts[0] or not texts[0].strip():
            raise BadRequest("'q' must be one non-empty line")
        model, direction = one_route(body, "/v1/attention")
        batcher = model.batcher
        if not batcher.engines.has_torch_weights():
            raise BadRequest(f"no attention maps: {model.info.model} has no PyTorch weights (serve run=<run dir>)")
        settings = direction.settings(default_settings(model.base))
        ((best, *_),) = await service.decode(request, batcher, texts, settings)
        data = await batcher.run_alone(
            lambda engines: cross_attention(engines, texts[0], best.tokens, settings.src_lang, settings.tgt_lang)
        )
        return JSONResponse({"translatedText": best.text, **data})

    async def health(request: Request) -> Response:  # exactly LibreTranslate's: clients compare it whole
        return JSONResponse({"status": "ok"})

    async def server_info(request: Request) -> Response:
        models = [m.info.__dict__ for m in served]
        return JSONResponse({**info.__dict__, "models": models, "api_key_required": keys is not None})

    async def api_spec(request: Request) -> Response:
        return JSONResponse(spec(importlib.metadata.version("seq2seq")))

    page = importlib.resources.files("seq2seq.serve").joinpath("page.html").read_text(encoding="utf-8")
    settings_json = json.dumps({**info.__dict__, "api_key_required": keys is not None})
    page = page.replace("{{SERVER}}", settings_json.replace("</", "<\\/"))  # JSON in a <script>: no "</"

    async def home(request: Request) -> Response:
        return HTMLResponse(page)

    def guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        return _answering_errors(handler, service)

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
        Route("/v1/translate", guarded(native), methods=["POST"]),
        Route("/v1/attention", guarded(attention_map), methods=["POST"]),
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
    return Starlette(routes=routes, lifespan=lifespan, middleware=[cors], exception_handlers=errors)


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


def _prefixes(body: dict[str, Any], count: int, listed: bool) -> list[str] | None:
    """/v1/translate's "prefix": the start of each translation, a string (or a list, one per string of q)."""
    if "prefix" not in body:
        return None
    value = body["prefix"]
    values = value if isinstance(value, list) else [value]
    if listed != isinstance(value, list) or len(values) != count or not all(isinstance(v, str) for v in values):
        raise BadRequest("'prefix' must be a string (q a string) or a list of strings as long as q")
    return values
