"""How fast the run's CTranslate2 export decodes on this machine with 8-bit weights against fp32,
measured, as training measures its precision: precision=int8 is timed against fp32 on a few sentences
of the run's own vocabulary, once per machine, model shape and search, and said when it is slower. The
answer is kept in the cache beside precision.json; later runs read it without importing torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seq2seq import cpuinfo, measurement_cache
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR
from seq2seq.cpu_sharing import usable_cores
from seq2seq.inference.job import DecodingJob
from seq2seq.inference.translator_api import TranslatorAPI
from seq2seq.measurement_cache import cached

log = logging.getLogger("seq2seq.translate")

PROBE_SENTENCES = 24
PROBE_WORDS = 12  # vocabulary entries per probe sentence: a typical Multi30k sentence's length


@dataclasses.dataclass(frozen=True)
class Timing:
    seconds: dict[str, float]  # what each candidate took to decode the probe, e.g. {"ctranslate2": 1.2, "int8": 0.8}

    def fastest(self) -> str:
        return min(self.seconds, key=self.seconds.__getitem__)


CACHE_NAME = "engines.json"


def cache_file() -> Path:
    return measurement_cache.cache_file(CACHE_NAME)


def probe_key(job: DecodingJob, candidates: tuple[str, ...]) -> str:
    """Machine (CPU, threads, library versions), model shape and search: what the timing depends on."""
    export = Path(job.model.run) / CTRANSLATE2_DIR
    config = export / "config.json"
    shape = hashlib.sha256(config.read_bytes() if config.is_file() else b"").hexdigest()[:12]
    size = (export / "model.bin").stat().st_size
    versions = "/".join(_version(p) for p in ("torch", "ctranslate2"))
    search = "greedy" if job.settings.beam == 1 else "beam"
    threads = job.options.threads or usable_cores()
    return f"{cpuinfo.cpu_name()}|{threads} threads|{versions}|{shape}:{size}|{search}|{','.join(candidates)}"


def _version(package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} none"


def cached_timing(job: DecodingJob, candidates: tuple[str, ...], load: Callable[[str], TranslatorAPI]) -> Timing:
    """The timing for this machine, model and search: from the cache, or measured now and cached.
    `load(candidate)` loads a candidate's translator; it is called only to measure."""
    return cached(CACHE_NAME, probe_key(job, candidates), Timing, lambda: measure_engines(candidates, load))


def measure_engines(candidates: tuple[str, ...], load: Callable[[str], TranslatorAPI], rounds: int = 2) -> Timing:
    """Times each candidate ("ctranslate2", "int8": CTranslate2 with 8-bit weights), as
    `load` gives it, decoding the same probe sentences with its search, after a warm-up batch; the
    candidates take turns (A, B, A, B) and each keeps its best round, so a burst of other work does not
    decide alone."""
    translators = {candidate: load(candidate) for candidate in candidates}
    sentences = probe_sentences(next(iter(translators.values())).tokenizers.src)
    for translator in translators.values():
        translator.translate(sentences[:4])
    seconds: dict[str, float] = {}
    for _ in range(rounds):
        for candidate, translator in translators.items():
            start = time.perf_counter()
            translator.translate(sentences)
            elapsed = time.perf_counter() - start
            seconds[candidate] = round(min(seconds.get(candidate, elapsed), elapsed), 4)
    return Timing(seconds)


def probe_sentences(tokenizer: Any, seed: int = 0) -> list[str]:
    """Sentences of the run's own source vocabulary (decoded from random ids past the specials), so the
    probe needs no data and runs alike for every language."""
    rng = random.Random(seed)
    size = tokenizer.get_vocab_size()
    first = min(300, size - 1)  # past the byte alphabet and special tokens, where the vocabulary has words
    return [tokenizer.decode([rng.randrange(first, size) for _ in range(PROBE_WORDS)]) for _ in range(PROBE_SENTENCES)]
