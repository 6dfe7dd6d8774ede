"""The teacher's translations of one direction's training sources: written a chunk at a time, resumed
after a kill without translating a finished line again, and kept for reuse by what they depend on.

A folder per cache key (`cache_key`: the teacher's weight files, the source lines and the decoding
settings) holds translations.jsonl, one JSON list per source line (its n-best texts, best first), and
progress.json: {"lines", "bytes", "seconds", "finished", "sha256"}. A chunk is appended and fsynced
before progress.json (replaced whole) counts it; bytes a killed process appended after the last count
are cut off before the next chunk goes on. A finished folder records its translations' SHA-256, and is
reused only while translations.jsonl still has it: an edited or damaged file is refused, by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from seq2seq import measurement_cache
from seq2seq.artifacts import file_lock
from seq2seq.artifacts.replacing import write_new_json
from seq2seq.config import UserError
from seq2seq.decoding_defaults import SEARCH_VERSION
from seq2seq.distill.output import COMMAND, read_json
from seq2seq.inference.translator_api import TranslatorAPI, one_line

log = logging.getLogger("seq2seq.distill")
TRANSLATIONS, PROGRESS, KEY = "translations.jsonl", "progress.json", "key.json"


@dataclass
class Progress:
    lines: int = 0  # source lines whose translations translations.jsonl holds
    bytes: int = 0  # its length after them
    seconds: float = 0.0  # the teacher's decoding time so far, summed over the runs that wrote them
    finished: bool = False
    sha256: str | None = None  # translations.jsonl's, once finished (None: finished by older code)


@dataclass(frozen=True)
class TeacherCache:
    """cache=, and what keys the teacher's translations kept there besides the source lines: the
    teacher's weight files and its search (beam, n-best, length penalty); and how many source lines
    the teacher translates between two saves of its progress."""

    root: Path
    weights: dict[str, str]  # each weight file's SHA-256 (`weight_digests`), as the plan hashed it
    search: dict[str, Any]
    chunk_lines: int


def teacher_translations(
    cache: TeacherCache, engine: TranslatorAPI, direction: str, sources: list[str]
) -> tuple[list[list[str]], Progress, Path]:
    """The teacher's n-best lists of one direction's sources, from the cache or translated into it, with
    the progress that made them and their folder."""
    key, parts = cache_key(cache.weights, sources, {**cache.search, "engine": engine.kind, "direction": direction})
    folder = cache.root / key
    try:  # a full disk, a read-only one: one line naming cache= (write_new_json leaves no part of a file)
        folder.mkdir(parents=True, exist_ok=True)
        with file_lock.held(folder, COMMAND, "translations"):
            try:
                progress = _progress(folder)
                if not (folder / KEY).is_file():
                    write_new_json(folder / KEY, parts)
                translating = engine.with_languages(*direction.split("-"))
                progress = _translate_held(translating, sources, folder, cache.chunk_lines, progress)
            except OSError:
                _cut_to_count(folder)  # while still held: no other process has resumed it yet
                raise
    except OSError as err:
        raise UserError(
            f"cache={cache.root}: cannot keep the teacher's translations there ({err.strerror or err}); "
            "free some space or give cache= another directory (a rerun resumes what was kept)"
        ) from err
    return read_translations(folder, len(sources)), progress, folder


def cache_folder(given: str | None) -> Path:
    """cache=: where the teacher's translations are kept (by default the machine's cache folder's distill/);
    a path that is no directory is refused in one line, before anything is written."""
    root = Path(given) if given else measurement_cache.cache_root() / "distill"
    for above in (root, *root.parents):
        if above.exists():
            if not above.is_dir():
                raise UserError(f"cache={root}: {above} is not a directory; give cache= a directory")
            break
    return root


def file_digest(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def weight_digests(weights: Sequence[Path]) -> dict[str, str]:
    """Each of the teacher's weight files and its SHA-256, hashed once for every key a run makes."""
    return {str(path): file_digest(path) for path in weights}


def cache_key(weights: dict[str, str], sources: list[str], settings: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key of a direction's translations and what went into it (kept beside them, for a reader).
    `weights`: the teacher's files and their digests (`weight_digests`)."""
    corpus = hashlib.sha256()
    for line in sources:
        corpus.update(line.encode("utf-8") + b"\n")
    parts = {
        "weights": dict(weights),
        "sources": corpus.hexdigest(),
        "lines": len(sources),
        "settings": settings,
        "search": SEARCH_VERSION,
    }
    # By content, not by path: the same files elsewhere are the same teacher.
    identity = {**parts, "weights": sorted(parts["weights"].values())}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24], parts


def translate_cached(engine: TranslatorAPI, sources: list[str], folder: Path, chunk_lines: int) -> Progress:
    """Fills `folder` with the teacher's translations of `sources`, resuming where an earlier run
    stopped; returns the finished progress. `folder` must be this key's (see cache_key)."""
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock.held(folder, COMMAND, "translations"):
        return _translate_held(engine, sources, folder, chunk_lines, _progress(folder))


def _progress(folder: Path) -> Progress:
    """What progress.json counts (nothing yet where there is none)."""
    return Progress(**read_json(folder / PROGRESS)) if (folder / PROGRESS).is_file() else Progress()


def _record(folder: Path, progress: Progress) -> None:
    """progress.json, replaced whole: a kill leaves the last count or this one, never part of a file."""
    write_new_json(folder / PROGRESS, asdict(progress))


def _translate_held(
    engine: TranslatorAPI, sources: list[str], folder: Path, chunk_lines: int, progress: Progress
) -> Progress:
    """translate_cached's work from `progress` on, in `folder` held by this process."""
    if progress.finished:
        check_finished(folder, progress)
        log.info("teacher's translations reused from %s (%d lines, finished earlier)", folder, progress.lines)
        return progress
    if progress.lines:
        log.info("resuming the teacher's translations at line %d of %d (%s)", progress.lines + 1, len(sources), folder)
    path = folder / TRANSLATIONS
    with path.open("ab") as out:
        out.truncate(progress.bytes)  # what a killed run appended after its last count
        out.seek(progress.bytes)  # so that tell() counts from the cut (appends go to the end anyway)
        bar = tqdm(total=len(sources), initial=progress.lines, unit="line", desc="teacher", disable=None)
        for start in range(progress.lines, len(sources), chunk_lines):
            chunk = sources[start : start + chunk_lines]
            began = time.perf_counter()
            results = engine.translate_nbest(chunk, first_line_number=start + 1)
            seconds = time.perf_counter() - began
            data = "".join(json.dumps([one_line(t.text) for t in r], ensure_ascii=False) + "\n" for r in results)
            out.write(data.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
            progress = Progress(start + len(chunk), out.tell(), progress.seconds + seconds)
            _record(folder, progress)
            bar.update(len(chunk))
        bar.close()
    progress.finished, progress.sha256 = True, file_digest(path)
    _record(folder, progress)
    rate = progress.lines / progress.seconds if progress.seconds else float("inf")
    log.info("teacher translated %d lines in %.1f s (%.1f lines/s)", progress.lines, progress.seconds, rate)
    return progress


def check_finished(folder: Path, progress: Progress) -> None:
    """A finished folder's translations.jsonl is the one it finished with; one finished before the
    digest was recorded gets it now (there is nothing earlier to compare it with)."""
    path = folder / TRANSLATIONS
    try:
        digest = file_digest(path)
    except OSError as err:
        raise UserError(f"{path}: unreadable ({err.strerror or err}); remove {folder} to translate again") from err
    if progress.sha256 is None:
        progress.sha256 = digest
        _record(folder, progress)
    elif digest != progress.sha256:
        raise UserError(
            f"{path}: not the translations this cache finished with (sha256 {digest[:12]}, "
            f"{progress.sha256[:12]} when finished: edited or damaged since); remove {folder} to translate again"
        )


def _cut_to_count(folder: Path) -> None:
    """Cuts translations.jsonl back to what progress.json counts: what a write that failed (a full
    disk) appended after it, as a rerun would; in `folder` held by this process. Where that cannot be
    done either (the folder cannot be read), the next run's resume does the cut."""
    with contextlib.suppress(OSError, UserError):
        counted = _progress(folder).bytes
        if (folder / TRANSLATIONS).is_file():
            os.truncate(folder / TRANSLATIONS, counted)


def read_translations(folder: Path, count: int) -> list[list[str]]:
    """The n-best texts of each of the `count` source lines, from a finished folder."""
    return list(iter_translations(folder, count))


def iter_translations(folder: Path, count: int) -> Iterator[list[str]]:
    """read_translations' rows one at a time, for a caller that writes them out as they come rather than
    hold them all (scripts/back_translate.py); the count is checked as the file is read."""
    path = folder / TRANSLATIONS
    number = 0
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if number > count:
                number += sum(1 for _ in file)
                break
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(
                    f"{path}:{number}: not a JSON list ({err.msg}); remove {folder} to translate again"
                ) from err
            yield row
    if number != count:
        raise UserError(f"{path}: {number} lines for {count} sources; remove {folder} to translate again")
