"""Validation curves of a Hydra sweep, side by side: JSON on stdout, one plot.

    seq2seq-train -m experiment=multi30k_en_de max_minutes=null max_steps=3000 model.attention_dropout=0,0.1
    python scripts/sweep_report.py multirun/<date>/<time> [more sweep or run dirs] --plot sweep.png

Every run of the sweeps is compared at equal updates (what results/sweep.md asks for): its validation
BLEU and loss at each validation, read from its TensorBoard events, labelled with the overrides that
differ between the runs given (.hydra/overrides.yaml, which Hydra writes into every run directory).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml


def run_dirs(paths: list[Path]) -> list[Path]:
    """The run directories under each path: a run itself, or a sweep's numbered runs."""
    runs = []
    for path in paths:
        found = sorted((p.parent.parent for p in path.glob("**/.hydra/overrides.yaml")), key=_job_order)
        if not found:
            raise SystemExit(f"error: {path}: no run directory (.hydra/overrides.yaml) under it")
        runs += found
    return runs


def _job_order(run: Path) -> list[tuple[int, str]]:
    """Hydra numbers a sweep's runs 0, 1, ..., 10: compare numbers as numbers (2 before 10)."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in run.parts]


def curves(run: Path) -> dict[str, list[list[float]]]:
    """{'bleu': [[update, value], ...], 'loss': [...]} from the run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})  # 0: every point, not a sample
    events.Reload()
    tags = events.Tags()["scalars"]
    return {
        name: [[e.step, round(e.value, digits)] for e in events.Scalars(tag)] if tag in tags else []
        for name, tag, digits in (("bleu", "valid/bleu", 2), ("loss", "valid/loss", 3))
    }


def report(paths: list[Path]) -> list[dict]:
    runs = run_dirs(paths)
    overrides = {run: yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text()) or [] for run in runs}
    shared = set.intersection(*(set(o) for o in overrides.values()))
    return [
        {"run": str(run), "overrides": [o for o in overrides[run] if o not in shared], **curves(run)} for run in runs
    ]


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (bleu_axes, loss_axes) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for row in rows:
        label = " ".join(row["overrides"]) or "(as shared)"
        for axes, name in ((bleu_axes, "bleu"), (loss_axes, "loss")):
            if row[name]:
                steps, values = zip(*row[name], strict=True)
                axes.plot(steps, values, marker="o", label=label)
    bleu_axes.set_ylabel("validation BLEU (greedy)")
    loss_axes.set_ylabel("validation loss")
    for axes in (bleu_axes, loss_axes):
        axes.set_xlabel("updates")
        axes.grid(alpha=0.3)
    bleu_axes.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="sweep (multirun) or run directories")
    parser.add_argument("--plot", type=Path, help="write the curves to this PNG")
    parser.add_argument("--title", default="validation at equal updates", help="the plot's title")
    args = parser.parse_args()
    rows = report(args.paths)
    if args.plot:
        plot(rows, args.plot, args.title)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
