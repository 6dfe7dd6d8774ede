"""Training and translation speed on an idle machine and beside competing jobs; prints one JSON object.

    python scripts/bench_shared.py --run <a trained run> --compete 1 --rounds 2

For each round (A/B/A/B in one window), each machine state (idle, then `--compete` competing jobs of
`--compete-threads` threads each, started and stopped here: scripts/competing_load.py) and each way
of waiting (`--waits`: "seq2seq" = what the package chooses by the machine it finds at start, libgomp's
long spin when idle and GOMP_SPINCOUNT=1000 beside other work (seq2seq/cpu_sharing.py); "short" =
GOMP_SPINCOUNT=1000 always; "gomp-default" = GOMP_SPINCOUNT=300000, libgomp's own default; "passive" =
OMP_WAIT_POLICY=PASSIVE), it measures
  - training: scripts/bench_train.py (small model, Multi30k), target tokens/s after warm-up;
  - translation: seq2seq-translate on the first --lines test sentences with each --engines engine,
    lines/s of the decoding itself, as the command logs it;
  - with --demo: the built-in demo (`seq2seq-train` alone), seconds from start to exit, and the update
    at which it reached its target.
With --late, the competing jobs of training start after the training (bench_train.py --compete): a
run that began on an idle machine, whose threads spin long, when a job arrives. The summary gives each
workload's loaded/idle ratio per way of waiting (the fair share beside one
2-thread job on 2 cores is 50%). Name the CPU class beside any figure you publish.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from competing_load import competing_jobs  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent
WAITS = {
    "seq2seq": {},
    "short": {"GOMP_SPINCOUNT": "1000"},
    "gomp-default": {"GOMP_SPINCOUNT": "300000"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
}
TRANSLATED = re.compile(r"translated (\d+) lines in ([\d.]+) s")


def environment(wait: str) -> dict[str, str]:
    mine = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "SEQ2SEQ_SET_GOMP_SPINCOUNT")  # this process's, or the user's
    env = {k: v for k, v in os.environ.items() if k not in mine}
    return {**env, **WAITS[wait]}


def train_speed(args: argparse.Namespace, wait: str, late_jobs: int) -> float:
    """Target tokens/s; `late_jobs` competing jobs start after the training's own start (--late)."""
    warmup = 3 if not late_jobs else args.late_warmup  # the late jobs start at the warm-up
    command = [
        sys.executable,
        str(SCRIPTS / "bench_train.py"),
        "--warmup",
        str(warmup),
        "--steps",
        str(args.train_steps),
    ]
    command += ["--data-dir", args.data_dir, "--model", args.model, "--compete", str(late_jobs)]
    command += ["--compete-threads", str(args.compete_threads)]
    done = subprocess.run(command, env=environment(wait), capture_output=True, text=True, check=True)
    return round(json.loads(done.stdout)["tgt_tokens_per_s"], 1)


def translate_speed(args: argparse.Namespace, wait: str, engine: str, source: Path) -> float:
    command = ["seq2seq-translate", f"run={args.run}", f"engine={engine}", f"beam={args.beam}"]
    command += [f"input={source}", "precision=fp32"]
    done = subprocess.run(command, env=environment(wait), capture_output=True, text=True, check=True)
    lines, seconds = TRANSLATED.search(done.stderr).groups()
    return round(int(lines) / float(seconds), 1)


def demo_seconds(wait: str) -> dict:
    """`seq2seq-train` with its defaults (the built-in task to its target), timed from start to exit."""
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        command = ["seq2seq-train", f"hydra.run.dir={run_dir}", "progress=false"]
        done = subprocess.run(command, env=environment(wait), capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
    reached = re.search(r"target reached: .* at update (\d+)", done.stdout + done.stderr)
    return {"demo_seconds": round(seconds, 1), "demo_target_reached_at_update": int(reached[1]) if reached else None}


def measure(args: argparse.Namespace, source: Path) -> list[dict]:
    rows = []
    for round_number in range(1, args.rounds + 1):
        for jobs in (0, args.compete):
            for wait in args.waits.split(","):
                late = jobs if args.late else 0
                with competing_jobs(jobs - late, args.compete_threads) as load:
                    row = {"round": round_number, "wait": wait, "load_average_1min_at_start": os.getloadavg()[0]}
                    if late:
                        load.update(competing_jobs=jobs, started="after the training")
                    if args.train_steps:
                        row["train_tgt_tokens_per_s"] = train_speed(args, wait, late)
                    for engine in filter(None, args.engines.split(",")):
                        row[f"translate_{engine}_lines_per_s"] = translate_speed(args, wait, engine, source)
                    if args.demo:
                        row.update(demo_seconds(wait))
                rows.append({**load, **row})
                print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def summary(rows: list[dict], compete: int) -> dict:
    """Median of the rounds for each (machine state, wait), and loaded / idle for each workload."""
    measures = [k for k in rows[0] if k.endswith("_per_s") or k == "demo_seconds"]
    out: dict = {}
    for wait in dict.fromkeys(r["wait"] for r in rows):
        idle = {m: median(r[m] for r in rows if r["wait"] == wait and r["competing_jobs"] == 0) for m in measures}
        busy = {m: median(r[m] for r in rows if r["wait"] == wait and r["competing_jobs"] == compete) for m in measures}
        out[wait] = {m: {"idle": idle[m], "competing": busy[m], "kept": round(busy[m] / idle[m], 3)} for m in measures}
        if "demo_seconds" in out[wait]:  # a time, not a rate: how many times longer it took
            demo = out[wait]["demo_seconds"]
            demo["slowdown"] = round(demo.pop("kept"), 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run with its ctranslate2/ export")
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1] / "data" / "multi30k"))
    parser.add_argument("--input", default=None, help="default: <data-dir>/test_2016_flickr.en.gz")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--model", default="small", help="bench_train's model")
    parser.add_argument("--train-steps", type=int, default=10, help="timed updates (0: no training rows)")
    parser.add_argument("--engines", default="torch,ctranslate2")
    parser.add_argument("--waits", default="seq2seq,gomp-default")
    parser.add_argument("--compete", type=int, default=1, help="competing jobs in the loaded state")
    parser.add_argument("--compete-threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--demo", action="store_true", help="also time the built-in demo to its target")
    parser.add_argument("--late", action="store_true", help="training's competing jobs start after it (no translation)")
    parser.add_argument("--late-warmup", type=int, default=12, help="updates before timing, with --late")
    args = parser.parse_args()
    if args.late:
        args.engines, args.demo = "", False  # a translation or the demo decides at its start: --late is training's

    from seq2seq.data.corpus import read_lines  # after the arguments: --help imports nothing heavy

    text = read_lines(args.input or str(Path(args.data_dir) / "test_2016_flickr.en.gz"))[: args.lines]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as source:
        source.write("\n".join(text) + "\n")
        source.flush()
        rows = measure(args, Path(source.name))
    from machine import machine_info

    report = {"machine": machine_info(), "settings": vars(args), "summary": summary(rows, args.compete), "rows": rows}
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
