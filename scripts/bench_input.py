"""The input pipeline alone, on a corpus of GPU size: what a GPU run waits for before its first update,
and how fast batches come once it trains. Prints one JSON object.

    python scripts/make_big_corpus.py --pairs 5000000 --out /tmp/big
    python scripts/bench_input.py --corpus /tmp/big --cache-dir /tmp/big-cache

1. preparation (tokenizer training, tokenizing, the Arrow cache), as seq2seq-train does it on first use:
   seconds, pairs per second, and the process's peak RSS (a corpus that does not fit in memory must
   still train: peak memory should not grow with the corpus), split into its two kinds: anonymous memory
   (what the process holds) and file pages (the memory-mapped Arrow files, which the kernel can drop);
2. a second start on the cache: seconds to the prepared data;
3. batches: the training stream (EpochBatches: token buckets, collate) for --seconds, on this thread:
   target tokens per second delivered, and batches per second.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path

from hydra import compose, initialize_config_module

import seq2seq.cli.train  # noqa: F401  (registers the config schema)
from seq2seq.data.batching import EpochBatches
from seq2seq.data.pipeline import prepare_data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class MemoryPeaks:
    """The highest RssAnon and RssFile of this process (/proc/self/status, Linux), sampled every 50 ms
    while in use: ru_maxrss counts both together, and only anonymous memory is held."""

    def __init__(self) -> None:
        self.peaks = {"RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> MemoryPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()

    def _read(self) -> None:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in self.peaks:
                self.peaks[key] = max(self.peaks[key], int(value.split()[0]))  # kB

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self._read()

    def report(self) -> dict[str, float]:
        return {f"peak_{key.lower()}_mb": round(kb / 1024, 1) for key, kb in self.peaks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a directory from scripts/make_big_corpus.py")
    parser.add_argument(
        "--cache-dir", required=True, help="where the tokenized data goes (a fresh one times a first start)"
    )
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=32768)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the batch stream is timed")
    args = parser.parse_args()
    corpus = Path(args.corpus).resolve()
    overrides = [
        "data=parallel_files",
        f"data.train_src={corpus}/train.{args.src}",
        f"data.train_tgt={corpus}/train.{args.tgt}",
        f"data.valid_src={corpus}/valid.{args.src}",
        f"data.valid_tgt={corpus}/valid.{args.tgt}",
        f"data.vocab_size={args.vocab}",
        f"data.cache_dir={args.cache_dir}",
    ]
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        cfg = compose("train", overrides=overrides)
    rss_at_start = peak_rss_mb()
    start = time.perf_counter()
    with MemoryPeaks() as preparing:
        data = prepare_data(cfg.data)
    prepare_seconds = time.perf_counter() - start
    rss_after_prepare = peak_rss_mb()
    start = time.perf_counter()
    data = prepare_data(cfg.data)
    cached_seconds = time.perf_counter() - start
    pairs = len(data.train)

    stream = EpochBatches(data.train, args.batch_tokens, cfg.seed, cfg.model.max_positions)
    tokens = batches = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for batch in stream.next_update(1, 0, 1):
            tokens += batch.tgt_tokens
            batches += 1
    stream_seconds = time.perf_counter() - start
    report = {
        "train_pairs": pairs,
        "prepare_seconds": round(prepare_seconds, 1),
        "prepare_pairs_per_s": round(pairs / prepare_seconds),
        "cached_start_seconds": round(cached_seconds, 2),
        "peak_rss_mb_at_start": round(rss_at_start, 1),
        "peak_rss_mb_after_prepare": round(rss_after_prepare, 1),
        "preparing": preparing.report(),  # peak_rssanon_mb (held) and peak_rssfile_mb (mapped files)
        "batch_tokens": args.batch_tokens,
        "stream_tgt_tokens_per_s": round(tokens / stream_seconds),
        "stream_batches_per_s": round(batches / stream_seconds, 1),
        "peak_rss_mb_end": round(peak_rss_mb(), 1),
        "machine": machine_info(),
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
