"""What machine a benchmark ran on, for the JSON reports, and how a report is given out."""

from __future__ import annotations

import json
import os
from pathlib import Path

# isort: off
from seq2seq.startup import prepare_process

prepare_process()  # before torch: OpenMP reads how its threads wait as it loads (cpu_sharing.py)
import torch  # noqa: E402
# isort: on

from seq2seq.allocator import allocator_in_use  # noqa: E402
from seq2seq.cpuinfo import cpu_name  # noqa: E402
from seq2seq.precision import cpu_capability  # noqa: E402


def machine_info() -> dict[str, object]:
    return {
        "cpu": cpu_name(),
        "cpu_capability": cpu_capability(),  # AMX / AVX512-BF16 / AVX512 / AVX2: never compare across classes
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "allocator": allocator_in_use(),  # this process's; reproduce.py replaces it with the training's
    }


def write_json_report(result: dict[str, object], path: str | Path | None) -> None:
    """A benchmark's result as JSON on standard output and, given `path` (its --json), the same text
    there."""
    text = json.dumps(result, indent=1)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
