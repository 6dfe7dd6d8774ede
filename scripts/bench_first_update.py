"""The first update's delay on a streamed mix of corpora, and the memory it takes: what a user training
on a crawl-sized mix waits for before training starts, and whether memory stays flat as the mix grows.
Prints one JSON object.

    python scripts/bench_first_update.py --data-dir data/multi30k --pairs 5000000 [--json out.json]
    python scripts/bench_first_update.py --pairs 1250000,5000000   # several sizes: memory against size

For each size a mix of three corpora is written to a temporary folder (deleted afterwards; never
committed), each pair 1 to 3 Multi30k training pairs joined (make_big_corpus.py's pairs, a seed a
corpus): `crawl`, 80% of the pairs, weight 1, cleaned with `--crawl-clean` (data.clean=hard by default: every
rule but alignment, the language identifier included, as the published figures were taken); `clean`, 10%, weight 3; `memory`, 10%, a TSV file,
weight 2. `seq2seq-train` then trains on it with data.streaming=true (data=multi30k for the validation
split, `--model`, everything else the defaults), twice: from an empty cache (the tokenizer learnt from
the head of the mix, data.stream_tokenizer_pairs, cleaned on the way) and again from the cache it left
(the tokenizer read back). Measured per start: the seconds from launching the command to its first
progress line, which the trainer writes once the first update is done, and the command's peak resident
memory by then (VmHWM, with the peaks of RssAnon, what the process holds, and RssFile, file pages the
kernel can drop, sampled every 50 ms); the run is then killed. The log lines before the first update
come with the second each arrived at, which says where the time went.

A delay is a result only on an idle machine: the JSON records `uptime` and the load average before
and after each start, and `--note` says what else was running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import make_big_corpus  # noqa: E402

# name, kind, share of the pairs, weight, whether --crawl-clean applies
MIX = (
    ("crawl", "parallel_files", 0.8, 1.0, True),
    ("clean", "parallel_files", 0.1, 3.0, False),
    ("memory", "tsv", 0.1, 2.0, False),
)
FIRST_UPDATE = re.compile(r"^update 1\b")  # reporting.py's ProgressLines line at the first update
TAB = "\t"
LOGGED_LINES = 80  # log lines kept (with their times) from before the first update


def write_mix(src: list[str], tgt: list[str], pairs: int, folder: Path, seed: int) -> list[dict[str, Any]]:
    """MIX's corpora of `pairs` pairs in all, made from (src, tgt), written under `folder`; each as a
    data.corpora entry (its files) with its pairs and weight."""
    folder.mkdir(parents=True, exist_ok=True)
    corpora = []
    counts = [round(pairs * share) for _, _, share, _, _ in MIX]
    counts[0] += pairs - sum(counts)
    for index, ((name, kind, _, weight, cleaned), count) in enumerate(zip(MIX, counts, strict=True)):
        rng = np.random.default_rng([seed, index])
        made = make_big_corpus.joined_pairs(src, tgt, count, rng)
        entry: dict[str, Any] = {"name": name, "kind": kind, "weight": weight, "pairs": count, "cleaned": cleaned}
        if kind == "tsv":
            entry["train"] = str(folder / f"{name}.tsv")
            with open(entry["train"], "w", encoding="utf-8") as out:  # a few Multi30k captions hold a tab
                out.writelines(f"{s.replace(TAB, ' ')}\t{t.replace(TAB, ' ')}\n" for s, t in made)
        else:
            entry["train_src"], entry["train_tgt"] = str(folder / f"{name}.en"), str(folder / f"{name}.de")
            with (
                open(entry["train_src"], "w", encoding="utf-8") as s_out,
                open(entry["train_tgt"], "w", encoding="utf-8") as t_out,
            ):
                for s, t in made:
                    s_out.write(s + "\n")
                    t_out.write(t + "\n")
        corpora.append(entry)
    return corpora


def corpora_override(corpora: list[dict[str, Any]], clean: str) -> str:
    """The data.corpora=[...] override of the mix; `clean`: the cleaned corpora's data.clean."""
    entries = []
    for corpus in corpora:
        keys = {"name": corpus["name"], "kind": corpus["kind"], "weight": corpus["weight"]}
        keys.update({key: f"'{corpus[key]}'" for key in ("train", "train_src", "train_tgt") if key in corpus})
        if corpus["cleaned"]:
            keys["clean"] = clean
        entries.append("{" + ",".join(f"{key}:{value}" for key, value in keys.items()) + "}")
    return f"data.corpora=[{','.join(entries)}]"


class Peaks:
    """The highest VmHWM, RssAnon and RssFile of process `pid` (/proc/<pid>/status), sampled every 50 ms."""

    FIELDS = ("VmHWM", "RssAnon", "RssFile")

    def __init__(self, pid: int) -> None:
        self.status = Path(f"/proc/{pid}/status")
        self.peaks = dict.fromkeys(self.FIELDS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def read(self) -> None:
        try:
            lines = self.status.read_text().splitlines()
        except OSError:  # the process has ended
            return
        for line in lines:
            key, _, value = line.partition(":")
            if key in self.peaks:
                self.peaks[key] = max(self.peaks[key], int(value.split()[0]))  # kB

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.read()

    def stop(self) -> dict[str, int]:
        """The peaks so far, in MB (read once more now)."""
        self.read()
        self._stop.set()
        self._thread.join()
        return {f"peak_{key.lower()}_mb": round(kb / 1024) for key, kb in self.peaks.items()}


def load() -> dict[str, Any]:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "uptime": uptime}


def first_update(command: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Launches `command`, waits for its first progress line, and kills it: the seconds to that line,
    the memory peaks by then, and the log lines before it with their seconds."""
    before = load()
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    peaks = Peaks(child.pid)
    logged: list[list[Any]] = []
    seconds = None
    timed_out = threading.Event()

    def stop() -> None:  # a start that hangs is stopped, and said so below
        timed_out.set()
        child.kill()

    killer = threading.Timer(timeout, stop)
    killer.start()
    try:
        for line in child.stdout:
            now = round(time.perf_counter() - started, 2)
            if FIRST_UPDATE.match(line):
                seconds = now
                break
            if len(logged) < LOGGED_LINES:
                logged.append([now, line.rstrip()[:300]])
        memory = peaks.stop()
    finally:
        killer.cancel()
        child.kill()  # this command's own child, by its handle: nothing else is touched
        child.wait()
    if seconds is None:
        tail = "\n".join(text for _, text in logged[-15:])
        why = (
            f"no first update within {timeout:.0f} s"
            if timed_out.is_set()
            else "seq2seq-train ended before its first update"
        )
        raise SystemExit(f"error: {why} (exit {child.returncode}):\n{tail}")
    return {"seconds_to_first_update": seconds, **memory, "before": before, "after": load(), "log": logged}


def bench_size(args: argparse.Namespace, src: list[str], tgt: list[str], pairs: int, workdir: Path) -> dict[str, Any]:
    folder = workdir / f"mix_{pairs}"
    start = time.perf_counter()
    corpora = write_mix(src, tgt, pairs, folder, args.seed)
    written = time.perf_counter() - start
    trainer = str(Path(sys.executable).parent / "seq2seq-train")
    env = {**os.environ, "SEQ2SEQ_CACHE": str(folder / "cache")}
    starts = []
    for cache in ("cold", "warm"):
        command = [
            trainer,
            "data=multi30k",
            f"data.dir={Path(args.data_dir).resolve()}",
            corpora_override(corpora, args.crawl_clean),
            "data.streaming=true",
            f"model={args.model}",
            "max_minutes=null",
            "max_steps=1000000",
            "valid_every=1000000",
            "save_every=1000000",
            "progress=true",
            "attention_images=false",
            f"hydra.run.dir={folder / 'runs' / cache}",
            *args.overrides,
        ]
        row = {"cache": cache, **first_update(command, env, args.timeout)}
        print(json.dumps({k: v for k, v in row.items() if k != "log"}), file=sys.stderr, flush=True)
        starts.append(row)
        shutil.rmtree(folder / "runs" / cache, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    mix = [{key: corpus[key] for key in ("name", "kind", "pairs", "weight", "cleaned")} for corpus in corpora]
    return {"pairs": pairs, "mix": mix, "written_seconds": round(written, 1), "command": command[1:], "starts": starts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(SCRIPTS.parent / "data" / "multi30k"))
    parser.add_argument("--pairs", default="5000000", help="the mix's pairs in all; several, comma-separated")
    parser.add_argument("--crawl-clean", default="hard", help="the crawl's data.clean (hard, default, none, [rules])")
    parser.add_argument("--model", default="small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds a start may take to its first update")
    parser.add_argument("--workdir", help="where the mix is written (a new temporary folder by default)")
    parser.add_argument("--note", default="", help="what else was running, for the JSON")
    parser.add_argument("--json", help="also write the JSON here")
    parser.add_argument("overrides", nargs="*", help="extra seq2seq-train overrides")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.pairs.split(",")]
    if min(sizes) < 10:
        sys.exit(f"error: --pairs {args.pairs}: give 10 or more pairs a size")
    data = Path(args.data_dir)
    if not (data / "train.en.gz").is_file():
        sys.exit(f"error: --data-dir {args.data_dir}: no train.en.gz (Multi30k: scripts/get_multi30k.py)")
    from machine import machine_info, write_json_report  # imports torch: not at import, so --help stays quick

    src, tgt = (make_big_corpus.read(data / f"train.{lang}.gz") for lang in ("en", "de"))
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_first_update_"))
    try:
        sizes_measured = [bench_size(args, src, tgt, pairs, workdir) for pairs in sizes]
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    result = {
        "name": "bench_first_update",
        "what": "seconds from launching seq2seq-train (data.streaming=true, a mix of three corpora) to its first "
        "update, and its peak memory by then; from an empty cache and from the cache the first start left",
        "crawl_clean": args.crawl_clean,
        "model": args.model,
        "seed": args.seed,
        "sizes": sizes_measured,
        "note": args.note,
        "machine": machine_info(),
    }
    write_json_report(result, args.json)


if __name__ == "__main__":
    main()
