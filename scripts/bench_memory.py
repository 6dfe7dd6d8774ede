"""Peak memory of `seq2seq-train` against corpus size; prints one JSON object.

    python scripts/bench_memory.py --data-dir data/multi30k --repeat 20 --steps 100

Writes a corpus made of the Multi30k training split repeated `--repeat` times (in a temporary
directory, deleted afterwards) and runs the real command on it and on Multi30k itself, each twice:
once building the tokenized cache (tokenizer training, tokenization) and once from the cache, and once
more with `data.streaming=true`. Each run trains `--steps` updates; its peak RSS is the child's
ru_maxrss. If memory did not depend on the corpus, the rows for both sizes match.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def write_corpus(data_dir: Path, target: Path, repeat: int) -> dict[str, str]:
    """train.{en,de} = Multi30k's training split `repeat` times; valid = Multi30k's validation split."""
    files = {}
    for split, name in (("train", "train"), ("valid", "val")):
        for side, lang in (("src", "en"), ("tgt", "de")):
            text = gzip.open(data_dir / f"{name}.{lang}.gz", "rb").read()
            path = target / f"{split}.{lang}"
            with path.open("wb") as out:
                for _ in range(repeat if split == "train" else 1):
                    out.write(text)
            files[f"data.{split}_{side}"] = str(path)
    return files


def peak_rss_mb(command: list[str], env: dict[str, str]) -> int:
    """Runs `command` in a fresh child (via a Python shim, so ru_maxrss is this command's alone)."""
    shim = (
        "import resource, subprocess, sys; "
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", shim, *command], env=env, check=True, capture_output=True, text=True)
    return round(int(out.stdout) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--model", default="small")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("overrides", nargs="*", help="extra seq2seq-train overrides")
    args = parser.parse_args()
    data_dir = Path(args.data_dir).resolve()
    workdir = Path(tempfile.mkdtemp(prefix="bench_memory_"))
    env = {**os.environ, "SEQ2SEQ_CACHE": str(workdir / "cache")}
    trainer = str(Path(sys.executable).parent / "seq2seq-train")
    results = []
    try:
        for repeat in (1, args.repeat):
            corpus = workdir / f"x{repeat}"
            corpus.mkdir()
            files = write_corpus(data_dir, corpus, repeat)
            pairs = sum(1 for _ in open(files["data.train_src"], "rb"))
            for mode in ("build cache", "from cache", "streaming"):
                command = [
                    trainer,
                    "data=parallel_files",
                    *[f"{k}={v}" for k, v in files.items()],
                    "data.src_lang=en",
                    "data.tgt_lang=de",
                    f"model={args.model}",
                    f"precision={args.precision}",
                    f"max_steps={args.steps}",
                    "valid_every=100000",
                    "save_every=100000",
                    "progress=false",
                    "attention_images=false",
                    f"hydra.run.dir={workdir / 'runs' / (f'x{repeat}_' + mode.replace(' ', '_'))}",
                    *(["data.streaming=true"] if mode == "streaming" else []),
                    *args.overrides,
                ]
                started = time.perf_counter()
                row = {"corpus_pairs": pairs, "repeat": repeat, "mode": mode, "peak_rss_mb": peak_rss_mb(command, env)}
                row["seconds"] = round(time.perf_counter() - started, 1)
                results.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        json.dumps(
            {
                "steps": args.steps,
                "model": args.model,
                "precision": args.precision,
                "runs": results,
                "machine": machine_info(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
