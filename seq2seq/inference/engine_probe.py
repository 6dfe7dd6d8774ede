"""Which engine decodes a run faster on this machine, measured, as training measures its precision.

On CPUs without bf16 instructions both engines decode in fp32 and CTranslate2 was the faster; on
CPUs with them PyTorch decodes in bf16 and the answer differs by CPU (faster on an AMX Xeon, slower
on an AVX512-BF16 Zen 5: docs/performance.md). So `seq2seq-translate run=` with engine=auto and
precision=auto times both on a few sentences of the run's own vocabulary, once per machine, model
shape and search, and keeps the answer in the cache beside precision.json; later runs read it without
importing torch. precision=int8 is timed against fp32 the same way, and said when it is slower.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import logging
import random
import time
from pathlib import Path
from typing import Any

from seq2seq import cpuinfo, measurement_cache
from seq2seq.cpu_sharing import usable_cores
from seq2seq.inference.ctranslate2_engine import CTranslate2Translator
from seq2seq.measurement_cache import cached
from seq2seq.run_files import CTRANSLATE2_DIR

log = logging.getLogger("seq2seq.translate")

PROBE_SENTENCES = 24
PROBE_WORDS = 12  # vocabulary entries per probe sentence: a typical Multi30k sentence's length


@dataclasses.dataclass(frozen=True)
class Timing:
    seconds: dict[str, float]  # what each candidate took to decode the probe, e.g. {"torch": 1.2, "ctranslate2": 0.8}
    torch_precision: str = "fp32"  # what precision=auto gave PyTorch here

    def fastest(self) -> str:
        return min(self.seconds, key=self.seconds.__getitem__)


CACHE_NAME = "engines.json"


def cache_file() -> Path:
    return measurement_cache.cache_file(CACHE_NAME)


def probe_key(cfg: Any, candidates: tuple[str, ...]) -> str:
    """Machine (CPU, threads, library versions), model shape and search: what the timing depends on."""
    export = Path(cfg.run) / CTRANSLATE2_DIR
    config = export / "config.json"
    shape = hashlib.sha256(config.read_bytes() if config.is_file() else b"").hexdigest()[:12]
    size = (export / "model.bin").stat().st_size
    versions = "/".join(_version(p) for p in ("torch", "ctranslate2"))
    search = "greedy" if cfg.beam == 1 else "beam"
    threads = cfg.threads or usable_cores()
    return f"{cpuinfo.cpu_name()}|{threads} threads|{versions}|{shape}:{size}|{search}|{','.join(candidates)}"


def _version(package: str) -> str:
    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{package} none"


def cached_timing(cfg: Any, candidates: tuple[str, ...]) -> Timing:
    """The timing for this machine, model and search: from the cache, or measured now and cached."""
    return cached(CACHE_NAME, probe_key(cfg, candidates), Timing, lambda: measure_engines(cfg, candidates))


def measure_engines(cfg: Any, candidates: tuple[str, ...], rounds: int = 2) -> Timing:
    """Times each candidate ("torch", "ctranslate2", "int8": CTranslate2 with 8-bit weights) decoding
    the same probe sentences with cfg's search, after a warm-up batch; the candidates take turns
    (A, B, A, B) and each keeps its best round, so a burst of other work does not decide alone."""
    translators = {candidate: _load(cfg, candidate) for candidate in candidates}
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
    torch_precision = _torch_precision(translators["torch"]) if "torch" in translators else "fp32"
    return Timing(seconds, torch_precision)


def probe_sentences(tokenizer: Any, seed: int = 0) -> list[str]:
    """Sentences of the run's own source vocabulary (decoded from random ids past the specials), so the
    probe needs no data and runs alike for every language."""
    rng = random.Random(seed)
    size = tokenizer.get_vocab_size()
    first = min(300, size - 1)  # past the byte alphabet and special tokens, where the vocabulary has words
    return [tokenizer.decode([rng.randrange(first, size) for _ in range(PROBE_WORDS)]) for _ in range(PROBE_SENTENCES)]


def _load(cfg: Any, candidate: str) -> Any:
    if candidate == "torch":  # torch is imported only here: a cached answer never loads it
        from seq2seq.device import pick_device
        from seq2seq.inference.loading import load_translator

        return load_translator(_with(cfg, engine="torch", precision="auto"), pick_device(cfg.device))
    precision = "int8" if candidate == "int8" else "fp32"
    return CTranslate2Translator(_with(cfg, precision=precision), Path(cfg.run) / CTRANSLATE2_DIR)


def _with(cfg: Any, **changes: Any) -> Any:
    """A copy of `cfg` (a TranslateConfig, or the command's DictConfig of one) with `changes`."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, **changes)
    from omegaconf import OmegaConf

    return OmegaConf.merge(cfg, changes)


def _torch_precision(translator: Any) -> str:
    dtype = str(next(translator.model.parameters()).dtype)
    return {"torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(dtype, "fp32")
