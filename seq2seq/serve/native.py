"""seq2seq's own routes, beside LibreTranslate's: `POST /v1/translate` (n-best lists with scores,
forced prefixes, any decoding setting a request may change) and `POST /v1/attention` (a line's
cross-attention map); both decode with one model, the one a request's languages route to."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seq2seq.config import UserError
from seq2seq.serve.attention import cross_attention
from seq2seq.serve.languages import Languages, Model
from seq2seq.serve.requests import NATIVE_KEYS, BadRequest, Limits, lines_of
from seq2seq.serve.service import Service
from seq2seq.serve.settings import settings_from_request


class NativeApi:
    """/v1/translate and /v1/attention over the models being served (`served`: app.Served, the first
    the default of a request that names no languages)."""

    def __init__(self, served: list[Any], service: Service, languages: Languages, limits: Limits) -> None:
        self.served, self.service, self.languages, self.limits = served, service, languages, limits
        self.by_batcher = {id(model.batcher): model for model in served}

    def one_route(self, body: dict[str, Any], what: str) -> tuple[Any, Model]:
        """/v1's routes decode with one model (n-best scores, prefixes and attention are one model's):
        the model a request goes to, and which of its directions."""
        if len(self.languages.models) == 1 and "source" not in body and "target" not in body:
            return self.served[0], self.languages.models[0]
        route = self.languages.route_of(
            {"target": self.served[0].info.target, **body} if not self.served[0].info.directions else body
        )
        if len(route.models) > 1:
            raise BadRequest(f"{route.source} -> {route.target} goes through {route.models[0].target}: "
                             f"{what} decodes with one model; use /translate")  # fmt: skip
        return self.by_batcher[id(route.models[0].decoder)], route.models[0]

    async def translate(self, request: Request) -> Response:
        body = await self.service.params(request, NATIVE_KEYS)
        texts, listed = lines_of(body, "q", self.limits)
        for index, text in enumerate(texts):  # n-best lists and prefixes are per line, as in seq2seq-translate
            if "\n" in text:
                raise BadRequest(
                    f"{f'q[{index}]' if listed else 'q'} holds a newline: /v1/translate takes one line a string"
                )
        model, direction = self.one_route(body, "/v1/translate")
        prefixes = _prefixes(body, len(texts), listed)
        vocabulary = model.batcher.engines.tokenizers.tgt.get_vocab_size()
        try:
            settings = settings_from_request(
                body, model.settings, vocabulary, prefixes is not None, self.limits.max_beam
            )
        except UserError as err:
            raise BadRequest(str(err)) from err
        results = await self.service.decode(request, model.batcher, texts, direction.settings(settings), prefixes)
        nbest = [[{"text": t.text, "score": t.score} for t in hyps] for hyps in results]
        translated = [hyps[0].text for hyps in results]
        answer = {"translatedText": translated, "nbest": nbest}
        return JSONResponse(answer if listed else {key: value[0] for key, value in answer.items()})

    async def attention(self, request: Request) -> Response:
        body = await self.service.params(request, ("q", "api_key", "source", "target"))
        texts, listed = lines_of(body, "q", self.limits)
        if listed or "\n" in texts[0] or not texts[0].strip():
            raise BadRequest("'q' must be one non-empty line")
        model, direction = self.one_route(body, "/v1/attention")
        batcher = model.batcher
        if not batcher.engines.has_torch_weights():
            raise BadRequest(f"no attention maps: {model.info.model} has no PyTorch weights (serve run=<run dir>)")
        settings = direction.settings(model.settings)
        ((best, *_),) = await self.service.decode(request, batcher, texts, settings)
        data = await batcher.run_alone(
            lambda engines: cross_attention(engines, texts[0], best.tokens, settings.src_lang, settings.tgt_lang)
        )
        return JSONResponse({"translatedText": best.text, **data})


def _prefixes(body: dict[str, Any], count: int, listed: bool) -> list[str] | None:
    """/v1/translate's "prefix": the start of each translation, a string (or a list, one per string of q)."""
    if "prefix" not in body:
        return None
    value = body["prefix"]
    values = value if isinstance(value, list) else [value]
    if listed != isinstance(value, list) or len(values) != count or not all(isinstance(v, str) for v in values):
        raise BadRequest("'prefix' must be a string (q a string) or a list of strings as long as q")
    return values
