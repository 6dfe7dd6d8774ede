"""What every route shares: reading a request's parameters, the API key, and turning texts into the
model's lines (line by line, sentence by sentence) and the translations back into texts.

A request is answered within the drain time after SIGTERM: one still waiting for the engine then is
refused with 503 and JSON, so that the server exits in time and no client gets a cancelled request.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from seq2seq.inference.settings import DecodingSettings
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.languages import Route
from seq2seq.serve.requests import BadRequest, Limits, check_keys, check_unicode, merged, parse_json
from seq2seq.serve.sentences import Line, split_line

DISCONNECT_POLL_SECONDS = 0.05  # how often a waiting request checks that its client is still there


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


@dataclass
class Service:
    batchers: list[Batcher]  # one per model
    limits: Limits
    keys: list[str] | None

    @contextlib.contextmanager
    def receiving(self) -> Iterator[None]:
        """Around a request's whole handling: every model's batch may wait for it (up to max_wait_ms)
        until it is read, since which model it goes to is not known before."""
        with contextlib.ExitStack() as stack:
            for batcher in self.batchers:
                stack.enter_context(batcher.receiving())
            yield

    async def params(self, request: Request, known: tuple[str, ...] | None) -> dict[str, Any]:
        """The query string's parameters, then a form's or a JSON body's over them (LibreTranslate's
        clients send any of the three); unknown keys are refused only where `known` is given."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        form = None
        body: dict[str, Any] = {}
        if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
            items = (await request.form()).multi_items()
            for key, value in items:
                if not isinstance(value, str):
                    raise BadRequest(f"{key!r} is a file upload, not text")
            form = list(items)
        else:
            body = parse_json(await request.body())
        params = merged(list(request.query_params.multi_items()), form, body)
        check_unicode(params)
        self.check_key(params)
        if known is not None:
            check_keys(params, known)
        return params

    def check_key(self, params: dict[str, Any]) -> None:
        if self.keys is None:
            return
        given = params.get("api_key")
        if not given:  # LibreTranslate's texts (its 400 here is 403 here: no key is no access either)
            raise BadRequest("Please contact the server operator to get an API key", 403)
        given = given.encode() if isinstance(given, str) else b""
        # Every key is compared, in constant time, so the answer's timing tells nothing about any key.
        matched = False
        for key in self.keys:
            matched |= hmac.compare_digest(given, key.encode())
        if not matched:
            raise BadRequest("Invalid API key", 403)

    async def decode(
        self,
        request: Request,
        batcher: Batcher,
        lines: list[str],
        settings: DecodingSettings,
        prefixes: list[str] | None = None,
    ) -> list[Any]:
        return await self.unless_gone(request, batcher, batcher.translate(lines, settings, prefixes))

    async def translate_texts(
        self, request: Request, texts: list[str], settings: DecodingSettings, route: Route, keep_edges: bool = False
    ) -> list[list[str]]:
        """Each text's translations (as many as settings.nbest, best first): its lines, each line's
        sentences decoded as the model's lines, joined back with the whitespace they had. With
        `keep_edges`, a line's leading and trailing whitespace is kept too (HTML and files). Through
        a pivot, each sentence's best translation by the first model is what the second translates."""
        plans: list[list[Line]] = [[split_line(line, route.source) for line in text.split("\n")] for text in texts]
        sentences = [sentence for plan in plans for line in plan for sentence in line.sentences]
        decoded: list[Any] = []
        if sentences:
            for model in route.models[:-1]:
                first = model.settings(model.decoder.settings)  # the server's search, one translation
                sentences = [best.text for best, *_ in await self.decode(request, model.decoder, sentences, first)]
            last = route.models[-1]
            decoded = await self.decode(request, last.decoder, sentences, last.settings(settings))
        answers, start = [], 0
        for plan in plans:
            per_line = []
            for line in plan:
                hypotheses = decoded[start : start + len(line.sentences)]
                start += len(line.sentences)
                per_line.append([
                    line.join([nbest[min(i, len(nbest) - 1)].text for nbest in hypotheses], keep_edges)
                    for i in range(settings.nbest)
                ])  # fmt: skip
            answers.append(["\n".join(line[i] for line in per_line) for i in range(settings.nbest)])
        return answers

    async def unless_gone(self, request: Request, batcher: Batcher, work: Awaitable[Any]) -> Any:
        """`work`'s result; if the client disconnects first, its job is cancelled, so the batcher drops
        it unless it is already being decoded (a client that goes away costs no decoding). After the
        drain time that SIGTERM started, it is cancelled too and the request refused (503)."""
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                raise ClientGone
            deadline = batcher.drain_deadline
            if deadline is not None and time.monotonic() >= deadline:
                task.cancel()
                raise BadRequest("the server is shutting down: this request was not translated in time", 503)
