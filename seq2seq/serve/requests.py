"""Request parameters in, checked values out: every malformed or over-large request is a `BadRequest`
(400, or 413 for too much) whose one-line message names what is wrong, before anything is decoded.

LibreTranslate reads its parameters from the query string, a form or a JSON body alike, and ignores
keys it does not know (its own page sends `secret`); so do its routes here. /v1/translate, this
server's own, refuses an unknown key: a misspelled decoding option would otherwise change nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# LibreTranslate's keys (its app.py): what its clients send.
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
    max_beam: int  # the largest beam, n-best list or alternatives + 1 a request may ask for


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw.strip():  # a POST whose parameters are all in the query string
        return {}
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadRequest(f"Invalid JSON format: malformed JSON: {err}") from err
    except RecursionError as err:  # nesting deeper than the parser's recursion
        raise BadRequest("Invalid JSON format: malformed JSON: nested too deeply") from err
    if not isinstance(body, dict):
        raise BadRequest(f"Invalid JSON format: the body must be a JSON object, not {type(body).__name__}")
    return body


def merged(query: list[tuple[str, str]], form: list[tuple[str, str]] | None, body: dict[str, Any]) -> dict[str, Any]:
    """The request's parameters: the query string's, then the form's or the JSON body's over them.
    A key given twice in a query or a form is a list (LibreTranslate's batch `q` in a form); a form's
    CRLF line ends are LF, as LibreTranslate makes them (a stray CR changes the translation)."""
    params = _multi(query)
    if form is not None:
        params |= _multi([(key, value.replace("\r\n", "\n")) for key, value in form])
    params |= body
    return params


def _multi(items: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in items:
        if key not in out:
            out[key] = value
        elif isinstance(out[key], list):
            out[key].append(value)
        else:
            out[key] = [out[key], value]
    return out


def check_keys(body: dict[str, Any], known: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise BadRequest(f"unknown key {unknown[0]!r}; the keys are {', '.join(known)}")


def check_unicode(body: dict[str, Any]) -> None:
    """JSON's \\ud800 escapes give strings that are not Unicode text (a lone surrogate): no tokenizer
    or key comparison can take them, so they are refused here, naming the key."""
    for key, value in body.items():
        for text in _strings(value):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                bad = ord(text[err.start])
                raise BadRequest(f"{key!r} holds a lone surrogate (U+{bad:04X}): not valid Unicode text") from err


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return [text for item in [*value, *value.values()] for text in _strings(item)]
    return []


def lines_of(body: dict[str, Any], key: str, limits: Limits) -> tuple[list[str], bool]:
    """The request's strings, and whether it sent a list (the answer then is a list). A string may
    hold several lines; each line counts against max_request_lines and max_line_chars (the model
    translates lines)."""
    texts, listed = texts_of(body, key)
    check_limits(texts, key, listed, limits)
    return texts, listed


def texts_of(body: dict[str, Any], key: str) -> tuple[list[str], bool]:
    if key not in body:  # LibreTranslate's text
        raise BadRequest(f"Invalid request: missing {key} parameter")
    value = body[key]
    if isinstance(value, str):
        return [value], False
    if isinstance(value, list):
        if not value:
            raise BadRequest(f"{key!r} is an empty list: send at least one string")
        for index, line in enumerate(value):
            if not isinstance(line, str):
                raise BadRequest(f"{key}[{index}] is {type(line).__name__}, not a string")
        return value, True
    raise BadRequest(f"{key!r} is {type(value).__name__}: send a string or a list of strings")


def check_limits(texts: list[str], key: str, listed: bool, limits: Limits) -> None:
    """Each line of each text counts against max_request_lines, and alone against max_line_chars."""
    count = sum(text.count("\n") + 1 for text in texts)
    if count > limits.max_request_lines:
        raise BadRequest(f"{_too_much(count, limits.max_request_lines)}{key!r} has {count} lines, "
                         f"more than max_request_lines={limits.max_request_lines}", 413)  # fmt: skip
    for index, text in enumerate(texts):
        for number, line in enumerate(text.split("\n")):
            if len(line) > limits.max_line_chars:
                where = f"{key}[{index}]" if listed else key
                where += f" line {number + 1}" if "\n" in text else ""
                raise BadRequest(f"{_too_much(len(line), limits.max_line_chars)}{where} has {len(line)} "
                                 f"characters, more than max_line_chars={limits.max_line_chars}", 413)  # fmt: skip


def _too_much(size: int, limit: int) -> str:
    """LibreTranslate's words for a request over a limit, before ours (which limit, and where)."""
    return f"Invalid request: request ({size}) exceeds text limit ({limit}); "


def check_format(body: dict[str, Any]) -> str:
    fmt = body.get("format") or "text"
    if fmt not in ("text", "html"):
        raise BadRequest(f"{fmt} format is not supported; format is 'text' or 'html'")
    return fmt


_DIGITS = re.compile(r"[0-9]+")  # ASCII digits only: str.isdigit() is true of '²', which int() refuses


def alternatives_of(body: dict[str, Any], limits: Limits) -> int:
    """`alternatives` n: n more translations, from a beam of at least n + 1, so n + 1 is bounded as
    /v1/translate's beam is (max_beam): a beam of 100001 held every other client for most of a minute."""
    value = body.get("alternatives", 0)
    if isinstance(value, str) and _DIGITS.fullmatch(value):  # a form or query sends numbers as text
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"Invalid request: alternatives parameter is not a number; alternatives={value!r}: "
                         "must be an integer >= 0")  # fmt: skip
    if value < 0:
        raise BadRequest(f"Invalid request: alternatives parameter must be >= 0; alternatives={value}")
    if value + 1 > limits.max_beam:
        raise BadRequest(f"Invalid request: alternatives parameter must be <= {limits.max_beam - 1}; "
                         f"alternatives={value} (max_beam={limits.max_beam})")  # fmt: skip
    return value


def unique_alternatives(alternatives: list[str], best: str) -> list[str]:
    """LibreTranslate's rule: each alternative once, none equal to the translation, none empty. Each
    line trimmed first: a hypothesis that starts with a word-initial token detokenizes with a space
    before it, and " C B A" is the translation "C B A" again, not another one."""
    seen = {_trimmed(best), ""}
    kept = []
    for text in map(_trimmed, alternatives):
        if text not in seen:
            seen.add(text)
            kept.append(text)
    return kept


def _trimmed(text: str) -> str:
    return "\n".join(line.strip() for line in text.split("\n"))
