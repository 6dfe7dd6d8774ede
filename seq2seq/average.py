"""`seq2seq-average`: average the weights of the last N periodic checkpoints of a run (or of the files given).

    seq2seq-average outputs/<date>/<time> --last 5
    seq2seq-average a.pt b.pt c.pt --output averaged.pt

Averaging the last few checkpoints smooths the noise of the final updates and usually gains a
little BLEU for free. The result keeps the newest checkpoint's config and vocabulary (so
`seq2seq-translate checkpoint=...` takes it) but no optimiser state: it is for translation.
Says on stderr what it averaged; prints one JSON object on stdout: the inputs, their updates and the output.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

from seq2seq.checkpoint import atomic_save, load_checkpoint
from seq2seq.config import UserError

KEEP = ("format", "config", "vocab", "step", "metrics")


def periodic_checkpoints(run_dir: Path, last: int) -> list[Path]:
    """The newest `last` step_N.pt of a run; fewer than asked is an error, as in fairseq's averaging:
    an "average" of one checkpoint is not what was asked for."""
    found = sorted((run_dir / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not found:
        raise UserError(f"{run_dir}: no checkpoints/step_*.pt to average")
    if len(found) < last:
        names = ", ".join(p.name for p in found)
        raise UserError(
            f"{run_dir}: --last {last} asks for {last} periodic checkpoints but the run has {len(found)} "
            f"({names}); give --last {len(found)} to average those"
        )
    return found[-last:]


def average(paths: list[Path]) -> dict[str, Any]:
    payloads = [load_checkpoint(p) for p in paths]
    configs = {json.dumps(p["config"]["model"], sort_keys=True) for p in payloads}
    if len(configs) > 1:
        raise UserError(f"{', '.join(map(str, paths))}: the checkpoints have different model configs")
    newest = max(payloads, key=lambda p: p["step"])
    averaged = {}
    for name, tensor in newest["model"].items():
        stacked = torch.stack([p["model"][name].float() for p in payloads])
        averaged[name] = stacked.mean(dim=0).to(tensor.dtype)
    result = {key: newest[key] for key in KEEP if key in newest}
    result["model"] = averaged
    result["averaged_from"] = [str(p) for p in paths]
    result["averaged_steps"] = [p["step"] for p in payloads]
    return result


def _newer_last(run_dir: Path, newest_step: int) -> int | None:
    """The update of last.pt when it is newer than every checkpoint averaged."""
    last = run_dir / "checkpoints" / "last.pt"
    if not last.is_file():
        return None
    step = load_checkpoint(last)["step"]
    return step if step > newest_step else None


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="seq2seq-average", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="a run directory, or checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="with a run directory: how many periodic checkpoints")
    parser.add_argument("--output", help="default: <run>/checkpoints/averaged.pt")
    args = parser.parse_args(argv)
    if args.last < 1:
        raise UserError(f"--last {args.last}: must be at least 1")
    first = Path(args.inputs[0])
    paths = periodic_checkpoints(first, args.last) if first.is_dir() else [Path(p) for p in args.inputs]
    output = (
        Path(args.output)
        if args.output
        else (first / "checkpoints" / "averaged.pt" if first.is_dir() else first.with_name("averaged.pt"))
    )
    result = average(paths)
    atomic_save(result, output)
    steps = result["averaged_steps"]
    print(
        f"averaged {len(paths)} checkpoint{'s' if len(paths) > 1 else ''} "
        f"({', '.join(p.name for p in paths)}; updates {', '.join(map(str, steps))}) into {output}",
        file=sys.stderr,
    )
    if first.is_dir() and (newer := _newer_last(first, max(steps))) is not None:
        print(
            f"warning: {first / 'checkpoints' / 'last.pt'} (update {newer}) is newer than every checkpoint "
            "averaged and is not in the average",
            file=sys.stderr,
        )
    json.dump({"inputs": [str(p) for p in paths], "steps": steps, "output": str(output)}, sys.stdout)
    print()
    return output
