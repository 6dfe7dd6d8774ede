"""The decoding settings of one request (`DecodingSettings`), checked by the rules and with the one-line
messages of the translate config. The engines take them per batch (`decoding_with`): nothing is set on
the server's shared engines.

Requests with equal settings are decoded together; a request that samples is decoded alone, with its
own seed, so that its samples are those `seq2seq-translate` draws for the same lines and seed.
"""

from __future__ import annotations

import math
import typing
from typing import Any

from seq2seq.config import UserError
from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.translator_api import check_beam_fits

# What /v1/translate may set: DecodingSettings' fields, of their types.
OPTIONS = ("beam", "nbest", "length_penalty", "sampling", "temperature", "top_k", "top_p", "seed")
_TYPES = {key: typing.get_type_hints(DecodingSettings)[key] for key in OPTIONS}
SEARCH_SIZES = ("beam", "nbest")  # what a request's decoding costs grows with: bounded by max_beam
LIMITS = ("max_len_a", "max_len_b", "batch_size")  # the server's own: no request sets them


def settings_from_request(
    body: dict[str, Any], server: DecodingSettings, vocabulary: int, prefix: bool, max_beam: int
) -> DecodingSettings:
    """The settings a /v1/translate body asks for over `server`'s (its model's job's); a wrong type or
    value is a UserError with the config's one-line message (e.g. "config error: beam=0: must be positive"):
    DecodingSettings checks itself by the rules of every way in. Only the server's own bounds are
    kept here (max_beam, finite numbers from JSON, which no command line can spell: NaN, 1e999)."""
    values = {key: getattr(server, key) for key in OPTIONS}
    for key in OPTIONS:
        if key in body:
            values[key] = _typed(key, body[key])
            if key in SEARCH_SIZES and values[key] > max_beam:
                raise UserError(f"config error: {key}={values[key]}: must be at most max_beam={max_beam}")
    limits = {key: getattr(server, key) for key in LIMITS}
    settings = DecodingSettings(**values, **limits, prefix=prefix)
    if not settings.sampling:
        check_beam_fits(settings.beam, vocabulary)
    return settings


def _typed(key: str, value: Any) -> Any:
    kind = _TYPES[key]
    # JSON's true is not a number, and 2.5 is not a beam: the same refusals OmegaConf gives on the command line.
    ok = isinstance(value, bool) if kind is bool else isinstance(value, int | float) and not isinstance(value, bool)
    if ok and isinstance(value, float) and not math.isfinite(value):  # JSON's NaN, or 1e999 read as inf
        raise UserError(f"config error: {key}={value!r}: must be a finite number")
    if kind is int and ok and value != int(value):
        ok = False
    if not ok:
        raise UserError(f"config error: {key}={value!r}: must be {'a boolean' if kind is bool else kind.__name__}")
    return kind(value)
