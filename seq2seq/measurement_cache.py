"""Measurements of this machine kept between runs (precision.json, engines.json, compile.json in SEQ2SEQ_CACHE or
~/.cache/seq2seq): one JSON object per file, an entry per key. An unreadable or unwritable file, or an
entry of another shape, costs only a new measurement. Imports no torch."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


CACHE_SETTING = "SEQ2SEQ_CACHE"  # the folder of every cache seq2seq keeps outside what a command names


def cache_root() -> Path:
    """$SEQ2SEQ_CACHE, else ~/.cache/seq2seq: the measurements, the tokenized data (unless
    data.cache_dir), the teacher's translations (unless cache=) and the ledger of replacing.py."""
    return Path(os.environ.get(CACHE_SETTING, Path.home() / ".cache" / "seq2seq"))


def cache_file(name: str) -> Path:
    return cache_root() / name


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
        log.info("measured %s once for this machine: kept in %s (%s sets the folder)", key, path, CACHE_SETTING)
    except OSError:
        pass
    return value
