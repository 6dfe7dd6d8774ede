"""GET /spec: the routes this server answers, as a Swagger 2.0 document (LibreTranslate serves its
API's spec there; clients and API explorers read it)."""

from __future__ import annotations

from typing import Any

_TEXT = {"in": "formData", "type": "string"}
_KEY = {"name": "api_key", **_TEXT, "required": False, "description": "needed where the server has API keys"}
_ERROR = {"description": 'a bad request: {"error": "<one line>"}'}


def _post(summary: str, parameters: list[dict[str, Any]], tag: str = "translate") -> dict[str, Any]:
    return {
        "post": {
            "tags": [tag],
            "summary": summary,
            "consumes": ["application/json", "application/x-www-form-urlencoded", "multipart/form-data"],
            "parameters": [*parameters, _KEY],
            "responses": {"200": {"description": "done"}, "400": _ERROR, "403": _ERROR, "413": _ERROR},
        }
    }


def _get(summary: str, tag: str = "misc") -> dict[str, Any]:
    return {"get": {"tags": [tag], "summary": summary, "responses": {"200": {"description": "done"}}}}


def spec(version: str) -> dict[str, Any]:
    q = {"name": "q", **_TEXT, "required": True, "description": "the text (or a list of texts)"}
    source = {"name": "source", **_TEXT, "required": False, "description": "a language code, or auto"}
    target = {"name": "target", **_TEXT, "required": False, "description": "a language code"}
    fmt = {"name": "format", **_TEXT, "required": False, "enum": ["text", "html"]}
    alternatives = {"name": "alternatives", "in": "formData", "type": "integer", "required": False}
    upload = {"name": "file", "in": "formData", "type": "file", "required": True}
    return {
        "swagger": "2.0",
        "info": {
            "title": "seq2seq-serve",
            "version": version,
            "description": "LibreTranslate's API over a seq2seq model, and the model's own /v1 routes",
        },  # fmt: skip
        "basePath": "/",
        "paths": {
            "/translate": _post("Translate text", [q, source, target, fmt, alternatives]),
            "/detect": _post("Detect the language of a text", [q]),
            "/translate_file": _post("Translate a file (.txt, .html, .srt, .docx)", [upload, source, target]),
            "/download_file/{filename}": _get("A translated file", "translate"),
            "/languages": _get("The languages and the targets of each", "translate"),
            "/frontend/settings": _get("Settings for LibreTranslate's page"),
            "/health": _get('Whether the server is up: {"status": "ok"}, as LibreTranslate answers'),
            "/v1/info": _get("The served models, their engines and languages, whether a key is required", "native"),
            "/v1/translate": _post("seq2seq-translate's options: beam, nbest, prefix, sampling", [q], "native"),
            "/v1/attention": _post("One line's translation and its cross-attention", [q], "native"),
        },
    }
