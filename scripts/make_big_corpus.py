"""A corpus of GPU size made from Multi30k, for the input-pipeline benchmark (never committed).

    python scripts/make_big_corpus.py --pairs 5000000 --out /tmp/big --data-dir data/multi30k

Each pair is 1 to 3 Multi30k training pairs chosen at random and joined (the same ones on both sides,
so it stays a translation), which gives longer and more varied lengths than the captions alone.
Writes train.en/train.de (plain text: the point is to measure our pipeline, not gzip) and the
validation split, as data=parallel_files reads them.
"""

from __future__ import annotations

import argparse
import gzip
from collections.abc import Iterator
from pathlib import Path

import numpy as np


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def joined_pairs(src: list[str], tgt: list[str], pairs: int, rng: np.random.Generator) -> Iterator[tuple[str, str]]:
    """`pairs` pairs, each 1 to 3 of the (src, tgt) pairs chosen by `rng` and joined, drawn a chunk at a
    time (bench_first_update.py's corpora are made the same way)."""
    chunk = 100_000
    for start in range(0, pairs, chunk):
        count = min(chunk, pairs - start)
        sizes = rng.integers(1, 4, size=count)
        picks = rng.integers(0, len(src), size=int(sizes.sum()))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        for i in range(count):
            chosen = picks[bounds[i] : bounds[i + 1]]
            yield " ".join(src[j] for j in chosen), " ".join(tgt[j] for j in chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5_000_000)
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1] / "data" / "multi30k"))
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    src, tgt = (read(data / f"train.{lang}.gz") for lang in (args.src, args.tgt))
    rng = np.random.default_rng(args.seed)
    with (
        (out / f"train.{args.src}").open("w", encoding="utf-8") as src_out,
        (out / f"train.{args.tgt}").open("w", encoding="utf-8") as tgt_out,
    ):
        for src_line, tgt_line in joined_pairs(src, tgt, args.pairs, rng):
            src_out.write(src_line + "\n")
            tgt_out.write(tgt_line + "\n")
    for lang in (args.src, args.tgt):
        (out / f"valid.{lang}").write_text("\n".join(read(data / f"val.{lang}.gz")) + "\n", encoding="utf-8")
    print(f"{args.pairs} pairs in {out}")


if __name__ == "__main__":
    main()
