"""Whether precision=auto's matmul measurement predicts the faster precision of a real update: for each
candidate recipe of an experiment, the matmul rates auto measures (fp32 and bf16, at the model's FFN
shape, with ROWS rows and with more) and the median seconds of real updates in fp32 and in bf16.
Prints one JSON object.

    python scripts/bench_precision.py multi30k_en_de --data-dir data/multi30k
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    parser.add_argument("--rows", default="64,256,1024", help="rows of the measured matmul, comma-separated")
    args = parser.parse_args()
    from seq2seq.startup import prepare_process

    prepare_process()
    from hydra import compose, initialize_config_module

    from seq2seq.config import register_configs

    register_configs()
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        base = compose("train", overrides=[f"experiment={args.experiment}", f"data.dir={args.data_dir}"])
    import time

    import torch

    import seq2seq.precision as precision
    from seq2seq.data.pipeline import prepare_data
    from seq2seq.device import pick_device
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.plan import apply_recipe
    from seq2seq.train.recipe import measure_pace

    if base.threads is not None:
        torch.set_num_threads(base.threads)
    data = prepare_data(base.data)
    device = pick_device(base.device)
    rows_kept = precision.ROWS
    candidates = []
    for recipe in base.recipes:
        cfg = copy.deepcopy(base)
        apply_recipe(cfg, recipe.name, set())
        d_model, ffn = cfg.model.d_model, cfg.model.ffn_dim
        rates = {}
        for rows in (int(r) for r in args.rows.split(",")):
            precision.ROWS = rows
            measured = precision.measure_matmul_rates(d_model, ffn)
            rates[str(rows)] = {"fp32": round(measured.fp32, 1), "bf16": round(measured.bf16, 1)}
        precision.ROWS = rows_kept
        paces = {}
        for name in ("fp32", "bf16"):
            cfg.precision = name
            pace = measure_pace(TrainingParts.of(cfg, device, compiled=False), data, device, time.perf_counter)
            paces[name] = {"seconds_per_update": round(pace.seconds, 4), "spread": round(pace.spread, 3)}
        candidates.append(
            {"recipe": recipe.name, "d_model": d_model, "ffn_dim": ffn, "matmul_gflops": rates, "update": paces}
        )
    print(
        json.dumps(
            {
                "experiment": args.experiment,
                "cpu_capability": precision.cpu_capability(),
                "threads": torch.get_num_threads(),
                "load_average_1min": os.getloadavg()[0],
                "candidates": candidates,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
