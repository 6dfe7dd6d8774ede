"""The Starlette app: LibreTranslate's `POST /translate`, `GET /languages`, `GET /health`, the native
`POST /v1/translate` and `POST /v1/attention`, and the page at `GET /`.

Every answer to a bad request is JSON `{"error": "<one line>"}` with 400, 413 (too much) or 403 (no
valid API key); nothing of such a request reaches the engine, so it cannot hurt another request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import importlib.resources
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from seq2seq.config import TranslateConfig, UserError
from seq2seq.serve.attention import cross_attention
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.requests import (
    LIBRETRANSLATE_KEYS,
    NATIVE_KEYS,
    BadRequest,
    Limits,
    alternatives_of,
    check_format,
    check_keys,
    check_languages,
    lines_of,
    parse_json,
)
from seq2seq.serve.settings import Settings, default_settings, settings_from_request

log = logging.getLogger("seq2seq.serve")
DISCONNECT_POLL_SECONDS = 0.05  # how often a waiting request checks that its client is still there


@dataclass(frozen=True)
class ServerInfo:
    model: str  # the run (or checkpoint) the server decodes with, as given
    engine: str  # "PyTorch" or "CTranslate2"
    source: str  # language codes
    target: str


def create_app(
    batcher: Batcher,
    base: TranslateConfig,
    info: ServerInfo,
    limits: Limits,
    keys: list[str] | None,
    lifespan: Any = None,
) -> Starlette:
    vocabulary = batcher.engines.tokenizers.tgt.get_vocab_size()
    defaults = default_settings(base)

    async def body_of(request: Request, known: tuple[str, ...]) -> dict[str, Any]:
        """A JSON or form body (LibreTranslate's clients send either), checked for unknown keys and a valid key."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.form()
            body: dict[str, Any] = {}
            for key, value in form.multi_items():
                if not isinstance(value, str):
                    raise BadRequest(f"{key!r} is a file upload, not text")
                body[key] = (
                    [*body[key], value]
                    if isinstance(body.get(key), list)
                    else [body[key], value]
                    if key in body
                    else value
                )
        else:
            body = parse_json(await request.body())
        check_key(body)
        check_keys(body, known)
        return body

    def check_key(body: dict[str, Any]) -> None:
        if keys is None:
            return
        given = body.get("api_key")
        given = given.encode() if isinstance(given, str) else b""
        # Every key is compared, in constant time, so the answer's timing tells nothing about any key.
        matched = False
        for key in keys:
            matched |= hmac.compare_digest(given, key.encode())
        if not matched:
            raise BadRequest("a valid api_key is required", 403)

    async def translate_lines(
        request: Request, texts: list[str], settings: Settings, prefixes: list[str] | None = None
    ) -> list[Any]:
        """Each text split into lines, all decoded in one job, each text's lines joined back."""
        lines = [line for text in texts for line in text.split("\n")]
        if prefixes is not None:
            prefixes = [prefix for text, prefix in zip(texts, prefixes, strict=True) for _ in text.split("\n")]
        results = await _unless_gone(request, batcher.translate(lines, settings, prefixes))
        joined, start = [], 0
        for text in texts:
            count = text.count("\n") + 1
            joined.append(results[start : start + count])
            start += count
        return joined

    async def libretranslate(request: Request) -> Response:
        body = await body_of(request, LIBRETRANSLATE_KEYS)
        texts, listed = lines_of(body, "q", limits)
        check_languages(body, info.source, info.target)
        check_format(body)
        alternatives = alternatives_of(body)
        settings = defaults
        if alternatives:  # n-best: the beam must hold them
            settings = dataclasses.replace(defaults, beam=max(defaults.beam, alternatives + 1), nbest=alternatives + 1)
        per_text = await translate_lines(request, texts, settings)
        translated = ["\n".join(nbest[0].text for nbest in lines) for lines in per_text]
        answer: dict[str, Any] = {"translatedText": translated if listed else translated[0]}
        if alternatives:
            others = [
                [
                    "\n".join(nbest[i].text if i < len(nbest) else "" for nbest in lines)
                    for i in range(1, alternatives + 1)
                ]
                for lines in per_text
            ]
            answer["alternatives"] = others if listed else others[0]
        if body.get("source", "auto") == "auto":
            detected = {"confidence": 100.0, "language": info.source}
            answer["detectedLanguage"] = [detected] * len(texts) if listed else detected
        return JSONResponse(answer)

    async def native(request: Request) -> Response:
        body = await body_of(request, NATIVE_KEYS)
        texts, listed = lines_of(body, "q", limits)
        for index, text in enumerate(texts):  # n-best lists and prefixes are per line, as in seq2seq-translate
            if "\n" in text:
                raise BadRequest(
                    f"{f'q[{index}]' if listed else 'q'} holds a newline: /v1/translate takes one line a string"
                )
        check_languages(body, info.source, info.target)
        prefixes = _prefixes(body, len(texts), listed)
        try:
            settings = settings_from_request(body, base, vocabulary, prefixes is not None)
        except UserError as err:
            raise BadRequest(str(err)) from err
        results = await _unless_gone(request, batcher.translate(texts, settings, prefixes))
        nbest = [[{"text": t.text, "score": t.score} for t in hyps] for hyps in results]
        translated = [hyps[0].text for hyps in results]
        answer = {"translatedText": translated, "nbest": nbest}
        return JSONResponse(answer if listed else {key: value[0] for key, value in answer.items()})

    async def attention_map(request: Request) -> Response:
        body = await body_of(request, ("q", "api_key"))
        texts, listed = lines_of(body, "q", limits)
        if listed or "\n" in texts[0] or not texts[0].strip():
            raise BadRequest("'q' must be one non-empty line")
        if not batcher.engines.has_torch_weights():
            raise BadRequest(f"no attention maps: {info.model} has no PyTorch weights (serve run=<run dir>)")
        ((best, *_),) = await batcher.translate(texts, defaults)
        data = await batcher.run_alone(lambda engines: cross_attention(engines, texts[0], best.tokens))
        return JSONResponse({"translatedText": best.text, **data})

    async def languages(request: Request) -> Response:
        return JSONResponse(
            [
                {"code": info.source, "name": info.source, "targets": [info.target]},
                {"code": info.target, "name": info.target, "targets": []},
            ]
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": info.model, "engine": info.engine, "source": info.source,
                             "target": info.target, "api_key_required": keys is not None})  # fmt: skip

    page = importlib.resources.files("seq2seq.serve").joinpath("page.html").read_text(encoding="utf-8")
    settings_json = json.dumps({**info.__dict__, "api_key_required": keys is not None})
    page = page.replace("{{SERVER}}", settings_json.replace("</", "<\\/"))  # JSON in a <script>: no "</"

    async def home(request: Request) -> Response:
        return HTMLResponse(page)

    routes = [
        Route("/", home),
        Route("/health", health),
        Route("/languages", languages),
        Route("/translate", _answering_errors(libretranslate, batcher), methods=["POST"]),
        Route("/v1/translate", _answering_errors(native, batcher), methods=["POST"]),
        Route("/v1/attention", _answering_errors(attention_map, batcher), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _answering_errors(handler: Callable[[Request], Any], batcher: Batcher) -> Callable[[Request], Any]:
    """A bad request is its status and one line of JSON; a request that breaks the engine, 500 for
    that request alone (the batcher has decoded the others without it)."""

    async def guarded(request: Request) -> Response:
        try:
            with batcher.receiving():
                return await handler(request)
        except BadRequest as err:
            return JSONResponse({"error": str(err)}, status_code=err.status)
        except ClientGone:
            log.debug("a client went away before its answer: its lines were not decoded")
            return Response(status_code=499)  # nobody reads it (nginx's code for a closed request)
        except UserError as err:  # e.g. a prefix longer than the model's positions
            return JSONResponse({"error": str(err)}, status_code=400)
        except Exception as err:  # noqa: BLE001
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning("request failed: %s", message)
            return JSONResponse({"error": f"translation failed: {message}"}, status_code=500)

    return guarded


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


async def _unless_gone(request: Request, work: Awaitable[Any]) -> Any:
    """`work`'s result; if the client disconnects first, its job is cancelled, so the batcher drops it
    unless it is already being decoded (a client that goes away costs no decoding)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise ClientGone


def _prefixes(body: dict[str, Any], count: int, listed: bool) -> list[str] | None:
    """/v1/translate's "prefix": the start of each translation, a string (or a list, one per string of q)."""
    if "prefix" not in body:
        return None
    value = body["prefix"]
    values = value if isinstance(value, list) else [value]
    if listed != isinstance(value, list) or len(values) != count or not all(isinstance(v, str) for v in values):
        raise BadRequest("'prefix' must be a string (q a string) or a list of strings as long as q")
    return values
