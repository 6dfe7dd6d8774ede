"""What a run shows while it trains, on rank 0: each window of train metrics and each validation in
its log lines (Report), TensorBoard events under <run>/tb and the progress (Dashboard): tqdm's bar on a
terminal, plain lines (ProgressLines) where the output goes to a file or a pipe. One module: the Report
is the Trainer's one door to all three, and they show the same figures.

The Trainer tells a `Report` what happened; the Report holds no state of the run (best, step, clock
stay the Trainer's). On the other ranks a Report has no dashboard and shows nothing. On resume the
Dashboard's writer purges events at or after the resumed step, so a run that crashed after its last
checkpoint shows no duplicated or stale points.

ProgressLines: tqdm redraws its bar with carriage returns; redirected to a file, every redraw stays
there (141 KB for the built-in demo), and the next log line starts glued to the last bar. A line every
`interval` seconds, each ending in a newline, says the same in a file that reads top to bottom.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from seq2seq.artifacts.run_dir import RunDir
from seq2seq.data.epoch_mix import CorpusTally
from seq2seq.inference.translator import Translator
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


class Dashboard:
    def __init__(
        self,
        run_dir: Path,
        start_step: int,
        max_steps: int | None,
        progress: bool,
        deadline: float | None = None,
        attention_share: float = 1.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`deadline`: the time on `clock` (the run's, time.monotonic by default) at which max_minutes runs
        out, if set; the bar's total is then the updates that fit before it (at the rate so far) when that
        is fewer than max_steps. `stream`: where progress goes (standard error by default), as a bar only
        if it is a terminal."""
        self.clock = clock or time.monotonic
        self.log_dir = RunDir(run_dir).tb
        self.writer = SummaryWriter(str(self.log_dir), purge_step=start_step + 1 if start_step else None)
        stream = sys.stderr if stream is None else stream
        plain = progress and not (hasattr(stream, "isatty") and stream.isatty())
        self.lines = ProgressLines(stream, start_step, clock=self.clock) if plain else None
        # The bar keeps the total (and its deadline arithmetic) even when lines are shown instead.
        self.bar = tqdm(
            total=max_steps,
            initial=start_step,
            unit="step",
            dynamic_ncols=True,
            file=stream,
            disable=not progress or plain,
        )
        self.exit_stack = ExitStack()
        if not self.bar.disable and _console_handlers():
            # On a terminal, console log lines go through tqdm.write: the bar is cleared, the line
            # printed on a line of its own, the bar redrawn below it (else the line is glued to the bar).
            self.exit_stack.enter_context(logging_redirect_tqdm())
        self.max_steps, self.deadline = max_steps, deadline
        self.start_step, self.step, self.started = start_step, start_step, self.clock()
        self.attention_share, self.attention_seconds, self.attention_draws = attention_share, 0.0, 0
        self.attention_images = 0
        self.train_figures: tuple[int, float, float | None] | None = None  # (update, loss, lr) last read back

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        if "train/loss" in values:  # the progress shows these, with the update they are of
            self.train_figures = (step, values["train/loss"], values.get("train/lr"))

    def text(self, step: int, tag: str, markdown: str) -> None:
        self.writer.add_text(tag, markdown, step)

    def attention(self, step: int, translator: Translator, sources: list[str], training_seconds: float) -> int:
        """Heatmaps of every attention kind and layer (heads tiled) for fixed validation sentences, while
        drawing them has cost less than `attention_share` of `training_seconds` (the run's training time
        so far): matplotlib takes a fraction of a second per image, which on a CPU would otherwise come
        out of the training budget at every validation. Cross-attention first, the most telling; the
        budget is checked after each image, so it is overrun by one image at most. Returns the images drawn."""
        budget = self.attention_share * training_seconds
        if self.attention_seconds >= budget:
            return 0
        # Imported here: matplotlib is needed only once a validation has run.
        from seq2seq.inference.attention_plots import attention_images, translate_with_attention

        started, drawn = self.clock(), 0
        samples = translate_with_attention(translator, sources)
        for tag, image in attention_images(samples, kinds=("cross", "encoder", "decoder_self")):
            self.writer.add_image(tag, image, step, dataformats="HWC")
            drawn += 1
            if self.attention_seconds + self.clock() - started >= budget:
                break
        self.attention_seconds += self.clock() - started
        self.attention_draws += 1
        self.attention_images += drawn
        return drawn

    def progress(self, steps: int, **postfix: Any) -> None:
        """Called after every update. The postfix is set before the bar moves, so the line drawn shows
        this update's figures (not those of the previous refresh). The loss and learning rate are the
        latest train scalars', read back every log_every updates only (a host sync on a GPU): where they
        are of an earlier update, the line says which, so a figure held for many updates does not look
        like a frozen run. They replace a `loss` or `lr` the caller passes."""
        train = self._train_postfix(self.step + steps)
        postfix = {**train, **{key: value for key, value in postfix.items() if key not in train}}
        if postfix:
            self.bar.set_postfix(postfix, refresh=False)
        self.step += steps  # tqdm's own count stays put when the bar is disabled
        if self.deadline is not None:
            self.bar.total = self._total_by_deadline(self.step)
        self.bar.update(steps)
        if self.lines is not None:
            self.lines.update(self.step, self.bar.total, postfix)

    def _train_postfix(self, step: int) -> dict[str, str]:
        if self.train_figures is None:
            return {}
        at, loss, lr = self.train_figures
        age = "" if at == step else f" (update {at})"
        return {"loss": f"{loss:.3f}{age}", **({"lr": f"{lr:.2e}"} if lr is not None else {})}

    def _total_by_deadline(self, step: int) -> int | None:
        now = self.clock()
        done = step - self.start_step
        if done <= 0 or now <= self.started:
            return self.max_steps
        fit = step + int(max(self.deadline - now, 0.0) / ((now - self.started) / done))
        return min(fit, self.max_steps) if self.max_steps else fit

    def hparams(self, record: dict[str, Any], metric_tags: list[str]) -> None:
        """The run's config as its checkpoints record it (`record`), for the HParams tab (compare sweep
        runs), against `metric_tags`: scalar tags the run already writes (valid/bleu, valid/best_bleu,
        ...), whose latest values the tab shows. Writing the metrics again under hparam/* put one-point
        cards before every learning curve."""
        flat = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in _flatten(record).items()}
        # Into this run's own event file: SummaryWriter.add_hparams writes a second run (<run>/tb/<name>),
        # which TensorBoard lists beside every run. The metric values are not needed: only their tags.
        for summary in hparams(flat, dict.fromkeys(metric_tags, 0.0)):
            self.writer.file_writer.add_summary(summary)

    def close(self) -> None:
        self.exit_stack.close()
        self.bar.close()
        self.writer.close()


def _console_handlers() -> list[logging.Handler]:
    """The root logger's handlers that print to the console, which logging_redirect_tqdm replaces
    (without them it would add one of its own)."""
    return [
        h
        for h in logging.getLogger().handlers
        if isinstance(h, logging.StreamHandler) and h.stream in (sys.stdout, sys.stderr)
    ]


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        elif value is not None:
            flat[f"{prefix}{key}"] = value
    return flat


INTERVAL_SECONDS = 30.0  # often enough to see a run is alive, rare enough for a day-long log


class ProgressLines:
    def __init__(
        self,
        stream: TextIO,
        start_step: int,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.stream, self.start_step, self.interval = stream, start_step, interval
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.last_written: float | None = None

    def update(self, step: int, total: int | None, postfix: dict[str, Any]) -> None:
        """Writes a line at the first update and then at most once every `interval` seconds."""
        now = self.clock()
        if self.last_written is not None and now - self.last_written < self.interval:
            return
        self.last_written = now
        self.stream.write(self.line(step, total, postfix, now - self.started) + "\n")
        self.stream.flush()

    def line(self, step: int, total: int | None, postfix: dict[str, Any], elapsed: float) -> str:
        done = f"update {step}/{total} ({100.0 * step / total:.0f}%)" if total else f"update {step}"
        rate = (step - self.start_step) / elapsed if elapsed > 0 else 0.0
        figures = "".join(f", {key}={value}" for key, value in postfix.items())
        return f"{done}, {elapsed / 60.0:.1f} min, {rate:.2f} updates/s{figures}"
