"""Request bodies in, checked values out: every malformed or over-large request is a `BadRequest`
(400, or 413 for too much) whose one-line message names what is wrong, before anything is decoded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# LibreTranslate's keys (https://libretranslate.com/docs): what its clients send.
LIBRETRANSLATE_KEYS = ("q", "source", "target", "format", "api_key", "alternatives")
# /v1/translate: LibreTranslate's and the decoding options of seq2seq-translate.
NATIVE_KEYS = ("q", "source", "target", "api_key", "prefix", "beam", "nbest", "length_penalty", "sampling")
NATIVE_KEYS += ("temperature", "top_k", "top_p", "seed")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    max_request_lines: int
    max_line_chars: int


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadRequest(f"malformed JSON: {err}") from err
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, not {type(body).__name__}")
    return body


def check_keys(body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise BadRequest(f"unknown key {unknown[0]!r}; the keys are {', '.join(known)}")


def lines_of(body: dict[str, Any], key: str, limits: Limits) -> tuple[list[str], bool]:
    """The request's strings, and whether it sent a list (the answer then is a list). A string may
    hold several lines; each line counts against max_request_lines (the model translates lines)."""
    if key not in body:
        raise BadRequest(f"missing {key!r}: the text to translate, a string or a list of strings")
    value = body[key]
    if isinstance(value, str):
        lines, listed = [value], False
    elif isinstance(value, list):
        if not value:
            raise BadRequest(f"{key!r} is an empty list: send at least one string")
        for index, line in enumerate(value):
            if not isinstance(line, str):
                raise BadRequest(f"{key}[{index}] is {type(line).__name__}, not a string")
        lines, listed = value, True
    else:
        raise BadRequest(f"{key!r} is {type(value).__name__}: send a string or a list of strings")
    count = sum(line.count("\n") + 1 for line in lines)
    if count > limits.max_request_lines:
        raise BadRequest(f"{key!r} has {count} lines, more than max_request_lines={limits.max_request_lines}", 413)
    for index, line in enumerate(lines):
        if len(line) > limits.max_line_chars:
            where = f"{key}[{index}]" if listed else key
            raise BadRequest(
                f"{where} has {len(line)} characters, more than max_line_chars={limits.max_line_chars}", 413
            )
    return lines, listed


def check_languages(body: dict[str, Any], source: str, target: str) -> None:
    """`source` may be the run's source language or "auto" (there is only one); `target` its target."""
    asked_source, asked_target = body.get("source", "auto"), body.get("target", target)
    if asked_source not in (source, "auto"):
        raise BadRequest(f"source={asked_source!r}: this server translates {source} -> {target}")
    if asked_target != target:
        raise BadRequest(f"target={asked_target!r}: this server translates {source} -> {target}")


def check_format(body: dict[str, Any]) -> None:
    fmt = body.get("format", "text")
    if fmt == "html":
        raise BadRequest("format='html' is not supported: send plain text with format='text'")
    if fmt != "text":
        raise BadRequest(f"format={fmt!r}: must be 'text'")


def alternatives_of(body: dict[str, Any]) -> int:
    value = body.get("alternatives", 0)
    if isinstance(value, str) and value.isdigit():  # a form body sends numbers as text
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"alternatives={value!r}: must be an integer >= 0")
    return value
