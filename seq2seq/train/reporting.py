"""What a run shows while it trains: each window of train metrics and each validation, on rank 0's
dashboard (TensorBoard and the progress bar: seq2seq/train/dashboard.py) and in its log lines.

The Trainer tells a `Report` what happened; the Report holds no state of the run (best, step, clock
stay the Trainer's). On the other ranks a Report has no dashboard and shows nothing.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from seq2seq.data.corpus_weights import CorpusTally
from seq2seq.train.dashboard import Dashboard
from seq2seq.train.evaluate import describe_directions
from seq2seq.train.update import UpdateResult

log = logging.getLogger(__name__)
# Attention images of the first validation sentence only: every kind and layer of one sentence shows
# what the model attends to, at a third of three sentences' drawing time.
ATTENTION_SENTENCES = 1


@dataclasses.dataclass
class TrainWindow:
    """The updates since the latest train-metrics log line."""

    started: float  # on Trainer.clock
    results: list[UpdateResult] = dataclasses.field(default_factory=list)

    def kept(self) -> list[UpdateResult]:
        return [r for r in self.results if not r.skipped]

    def tokens(self) -> float:
        return float(sum(r.tgt_tokens for r in self.kept()))

    def loss(self) -> float:
        return sum(r.loss * r.tgt_tokens for r in self.kept()) / max(self.tokens(), 1.0)

    def nll(self) -> float:
        return sum(r.nll * r.tgt_tokens for r in self.kept()) / max(self.tokens(), 1.0)


class Report:
    def __init__(self, dashboard: Dashboard | None = None) -> None:
        self.dashboard = dashboard
        self.shown: dict[str, str] = {}  # the bar's loss and lr, as of the latest window
        self.corpora_logged = 0  # the last epoch whose corpus counts went to the log

    @classmethod
    def open(
        cls,
        run_dir: Path,
        step: int,
        max_steps: int | None,
        progress: bool,
        attention_images_share: float,
        deadline: float | None,
        clock: Callable[[], float],
    ) -> Report:
        """Rank 0's: a dashboard from update `step` on (the bar runs to max_steps; progress= and
        attention_images_share= as the run has them); `deadline` when max_minutes runs out."""
        return cls(Dashboard(run_dir, step, max_steps, progress, deadline, attention_images_share, clock=clock))

    def window(self, step: int, window: TrainWindow, now: float, **figures: float) -> None:
        """A window's train metrics; `figures`: lr, epoch, skipped_updates as the Trainer has them now."""
        if self.dashboard is None or not window.kept():
            return
        self.dashboard.scalars(
            step,
            {
                "train/loss": window.loss(),
                "train/ppl": float(np.exp(min(window.nll(), 50.0))),
                "train/lr": figures["lr"],
                "train/grad_norm": window.kept()[-1].grad_norm,
                "train/tgt_tokens_per_s": window.tokens() / max(now - window.started, 1e-9),
                "train/epoch": figures["epoch"],
                "train/skipped_updates": figures["skipped_updates"],
            },
        )
        self.shown = {"loss": f"{window.loss():.3f}", "lr": f"{figures['lr']:.2e}"}

    def corpora(self, step: int, tally: CorpusTally | None, final: bool = False) -> None:
        """data.corpora: the rows each corpus gave the current epoch so far (every rank's), and their
        shares, in TensorBoard; in the log each epoch that has ended, and with `final` the current one."""
        if self.dashboard is None or tally is None:
            return
        total = max(int(tally.rows.sum()), 1)
        for name, rows in zip(tally.names, tally.rows, strict=True):
            self.dashboard.scalars(
                step, {f"data/corpus_pairs/{name}": float(rows), f"data/corpus_share/{name}": rows / total}
            )
        if tally.finished is not None and tally.finished[0] > self.corpora_logged:
            epoch, rows = tally.finished
            log.info("corpora shown: epoch %d: %s", epoch, describe_shown(tally.names, rows))
            self.corpora_logged = epoch
        if final and tally.rows.any():
            shown = describe_shown(tally.names, tally.rows)
            log.info("corpora shown: epoch %d, to update %d: %s", tally.epoch, step, shown)

    def progress(self, tokens_per_second: float) -> None:
        """Every update: the bar moves at least every few seconds."""
        if self.dashboard is not None:
            self.dashboard.progress(1, **self.shown, tok_s=f"{tokens_per_second:,.0f}")

    def validation(
        self, step: int, metrics: dict[str, float], better: bool, best_metric: str, best: dict[str, float] | None
    ) -> None:
        """A validation's scores; `best`: the best so far ({"value", "step"}), None while every one diverged."""
        log.info(
            "validation at update %d: loss %.3f ppl %.2f BLEU %.2f chrF %.2f exact %.1f%%%s%s",
            step,
            metrics["loss"],
            metrics["ppl"],
            metrics["bleu"],
            metrics["chrf"],
            metrics["accuracy"],
            describe_directions(metrics),
            "  (new best)" if better else "",
        )
        if self.dashboard is not None:
            self.dashboard.scalars(step, {f"valid/{k}": v for k, v in metrics.items()})
            if best is not None:
                self.dashboard.scalars(step, {f"valid/best_{best_metric}": best["value"]})

    def samples(self, step: int, samples: list[tuple[str, str, str]], translator: Any, seconds: float | None) -> None:
        """The validation's first (source, reference, translation) rows, and with `seconds` (the training
        time so far; None: no images) the attention of the first sentence."""
        if self.dashboard is None:
            return
        table = "\n".join("| " + " | ".join(_cell(t) for t in row) + " |" for row in samples)
        self.dashboard.text(step, "valid/translations", "| source | reference | translation |\n|---|---|---|\n" + table)
        if seconds is not None:
            sources = [source for source, _, _ in samples[:ATTENTION_SENTENCES]]
            self.dashboard.attention(step, translator, sources, seconds)

    def hparams(self, record: dict[str, Any], metrics: dict[str, float], best_metric: str) -> None:
        """The HParams tab: `record` (the config as the checkpoints keep it) against the validation tags
        the run writes; their last points are the final weights' scores and the best so far."""
        if self.dashboard is not None:
            self.dashboard.hparams(record, [*(f"valid/{k}" for k in metrics), f"valid/best_{best_metric}"])

    def close(self, training_seconds: float) -> None:
        if self.dashboard is None:
            return
        dashboard = self.dashboard
        dashboard.close()
        if dashboard.attention_draws:
            log.info(
                "attention images: %d at %d of the validations, %.1f s of drawing, %.2f%% of the training time",
                dashboard.attention_images,
                dashboard.attention_draws,
                dashboard.attention_seconds,
                100 * dashboard.attention_seconds / max(training_seconds, 1e-9),
            )


def _cell(text: str) -> str:
    """A Markdown table cell: a '|' inside a sentence would end the cell early."""
    return text.replace("|", r"\|")


def describe_shown(names: Sequence[str], rows: np.ndarray) -> str:
    """Each corpus's rows and share, for the log: "alpha 40 (25.0%), beta 120 (75.0%)"."""
    total = max(int(rows.sum()), 1)
    return ", ".join(f"{name} {int(count):,} ({count / total:.1%})" for name, count in zip(names, rows, strict=True))
