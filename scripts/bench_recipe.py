"""How stable recipe=auto's choice is: the recipe choice alone (no training after it), run several times,
each in a fresh process as a run would make it, each with a measurement cache of its own (a new machine's
first run; the tokenized data is read from the usual cache). Prints one JSON object: each run's choice and
its log lines, and a summary.

    python scripts/bench_recipe.py multi30k_en_de --data-dir data/multi30k --minutes 30 --runs 5
    python scripts/bench_recipe.py multi30k_en_de --minutes 30 --runs 5 --competing-jobs 1

It calls `choose_recipe` as `seq2seq.train.command` does, so it times the code it imports: put an older
checkout first on PYTHONPATH to measure that one the same way.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def one_choice(experiment: str, data_dir: str, minutes: float, data_cache: str) -> dict:
    """In this process: compose the experiment's config, prepare its data, choose, and say what was logged."""
    from seq2seq.startup import prepare_process

    prepare_process()
    from hydra import compose, initialize_config_module

    from seq2seq.config import register_configs

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        overrides = [f"experiment={experiment}", f"data.dir={data_dir}", f"max_minutes={minutes:g}"]
        overrides.append(f"data.cache_dir={data_cache}")
        cfg = compose("train", overrides=overrides)
    import torch

    from seq2seq.data.pipeline import prepare_data
    from seq2seq.device import pick_device
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.plan import plan_recipes
    from seq2seq.train.recipe import choose_recipe
    from seq2seq.train.trainer import Trainer

    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("seq2seq").addHandler(Keep())
    logging.getLogger("seq2seq").setLevel(logging.INFO)
    data = prepare_data(cfg.data)
    started = time.perf_counter()
    recipes = plan_recipes(cfg, overrides)
    chosen = choose_recipe(recipes, data, pick_device(cfg.device), DistContext(), Trainer.clock).candidate
    seconds = time.perf_counter() - started
    recipe_lines = [line for line in lines if line.startswith("recipe")]
    return {"recipe": chosen.name, "choice_seconds": round(seconds, 2), "log": recipe_lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--competing-jobs", type=int, default=0, help="other work on the machine meanwhile")
    parser.add_argument("--keep-measurements", action="store_true", help="use the usual measurement cache")
    parser.add_argument("--data-cache", help=argparse.SUPPRESS)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process: one choice
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_choice(args.experiment, args.data_dir, args.minutes, args.data_cache)))
        return
    from competing_load import competing_jobs

    from seq2seq.measurement_cache import cache_root

    runs = []
    with competing_jobs(args.competing_jobs) as competing, tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            env = dict(os.environ)
            if not args.keep_measurements:
                env["SEQ2SEQ_CACHE"] = str(Path(scratch) / str(run))
            child = [sys.executable, __file__, args.experiment, "--one", "--data-dir", args.data_dir]
            child += ["--minutes", str(args.minutes), "--data-cache", str(cache_root())]
            done = subprocess.run(child, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                sys.exit(f"bench_recipe.py: a choice failed:\n{done.stderr[-2000:]}")
            runs.append({**json.loads(done.stdout.splitlines()[-1]), "load_average_1min": os.getloadavg()[0]})
    choices = Counter(run["recipe"] for run in runs)
    print(
        json.dumps(
            {
                "experiment": args.experiment,
                "minutes": args.minutes,
                "runs": runs,
                "choices": dict(choices),
                "same_every_time": len(choices) == 1,
                **competing,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
