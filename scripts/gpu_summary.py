"""The short lines scripts/check_gpu.sh prints of its JSON reports (the whole reports stay beside them).

python scripts/gpu_summary.py outputs/check_gpu/bench_train_gpu_bf16.json ...
python scripts/gpu_summary.py --ddp /tmp/check_gpu_runs outputs/check_gpu/ddp.log   # the torchrun resume check
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH_KEYS = (
    "seconds_per_update",
    "tgt_tokens_per_s",
    "mfu",
    "gpu_busy_fraction",
    "gpu_kernels_per_update",
    "cuda_synchronizations_per_update",
    "host_syncs_per_update",
    "first_update_s",
    "batch_wait_seconds_per_update",
    "batch_make_seconds_per_update",
    "peak_gpu_memory_mb",
    "host_top_self_cpu_us_per_update",
)


def summarise(path: Path) -> None:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        print(f"{path.name}: {err}")
        return
    if "runs" in report:  # bench_train.py --runs
        print(path.name, report.get("gpu"), "bf16 matmul GFLOP/s:", report.get("matmul_peak_bf16_gflops_per_s"))
        for row in report["runs"]:
            figures = row.get("error") or {k: row.get(k) for k in BENCH_KEYS}
            print(" ", row["model"], row["batch_tokens"], row.get("precision"), figures)
    elif "rows" in report:  # bench_translate_gpu.py
        for row in report["rows"]:
            print(row)
    else:  # reproduce.py
        print({k: v for k, v in report.items() if k not in ("validation_curve", "machine", "candidates")})


def ddp_check(out: Path, log_file: Path) -> None:
    """Whether the resumed torchrun run ended with the uninterrupted one's weights, bit for bit."""
    import torch

    from seq2seq.artifacts.checkpoint import load_checkpoint

    a, b = (load_checkpoint(out / name / "checkpoints" / "last.pt") for name in ("ddp_straight", "ddp_resumed"))
    same = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    log = log_file.read_text()
    print(
        f"steps {a['step']}/{b['step']}, resumed: {'resumed ' in log}, nccl: {'nccl backend' in log}, "
        f"bitwise equal: {same}"
    )


if __name__ == "__main__":
    if sys.argv[1] == "--ddp":
        ddp_check(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        for name in sys.argv[1:]:
            summarise(Path(name))
