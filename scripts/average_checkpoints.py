"""Average the weights of the last N periodic checkpoints of a run (or of the files given).

    python scripts/average_checkpoints.py outputs/<date>/<time> --last 5
    python scripts/average_checkpoints.py a.pt b.pt c.pt --output averaged.pt

Averaging the last few checkpoints smooths the noise of the final updates and usually gains a
little BLEU for free. The result keeps the newest checkpoint's config and vocabulary (so
`seq2seq-translate checkpoint=...` takes it) but no optimiser state: it is for translation.
Prints one JSON object: the inputs and the output path.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from seq2seq.checkpoint import atomic_save, load_checkpoint

KEEP = ("format", "config", "vocab", "step", "metrics")


def periodic_checkpoints(run_dir: Path, last: int) -> list[Path]:
    found = sorted((run_dir / "checkpoints").glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    if not found:
        raise SystemExit(f"error: {run_dir}: no checkpoints/step_*.pt to average")
    return found[-last:]


def average(paths: list[Path]) -> dict:
    payloads = [load_checkpoint(p) for p in paths]
    configs = {json.dumps(p["config"]["model"], sort_keys=True) for p in payloads}
    if len(configs) > 1:
        raise SystemExit("error: the checkpoints have different model configs")
    newest = max(payloads, key=lambda p: p["step"])
    averaged = {}
    for name, tensor in newest["model"].items():
        stacked = torch.stack([p["model"][name].float() for p in payloads])
        averaged[name] = stacked.mean(dim=0).to(tensor.dtype)
    result = {key: newest[key] for key in KEEP if key in newest}
    result["model"] = averaged
    result["averaged_from"] = [str(p) for p in paths]
    return result


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", help="a run directory, or checkpoint files")
    parser.add_argument("--last", type=int, default=5, help="with a run directory: how many periodic checkpoints")
    parser.add_argument("--output", help="default: <run>/checkpoints/averaged.pt")
    args = parser.parse_args(argv)
    first = Path(args.inputs[0])
    paths = periodic_checkpoints(first, args.last) if first.is_dir() else [Path(p) for p in args.inputs]
    output = (
        Path(args.output)
        if args.output
        else (first / "checkpoints" / "averaged.pt" if first.is_dir() else first.with_name("averaged.pt"))
    )
    atomic_save(average(paths), output)
    json.dump({"inputs": [str(p) for p in paths], "output": str(output)}, sys.stdout)
    print()
    return output


if __name__ == "__main__":
    main()
