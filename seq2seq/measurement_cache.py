"""Measurements of this machine kept between runs (precision.json, engines.json, compile.json in SEQ2SEQ_CACHE or
~/.cache/seq2seq): one JSON object per file, an entry per key. An unreadable or unwritable file, or an
entry of another shape, costs only a new measurement. Imports no torch."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def cache_file(name: str) -> Path:
    return Path(os.environ.get("SEQ2SEQ_CACHE", Path.home() / ".cache" / "seq2seq")) / name


def cached(name: str, key: str, kind: type[T], measure: Callable[[], T]) -> T:
    """The `kind` (a dataclass) stored under `key` in the cache file `name`, or `measure()`, stored."""
    path = cache_file(name)
    try:
        cache: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    cache = cache if isinstance(cache, dict) else {}
    if isinstance(entry := cache.get(key), dict):
        try:
            return kind(**entry)
        except TypeError:  # an entry of another shape: measure again
            pass
    value = measure()
    cache[key] = dataclasses.asdict(value)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(cache, indent=1))
        os.replace(temporary, path)
    except OSError:
        pass
    return value
