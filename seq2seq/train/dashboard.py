"""What the user watches: TensorBoard events under <run>/tb and the progress: tqdm's bar on a terminal,
plain lines (progress_lines.py) where the output goes to a file or a pipe.

Only rank 0 creates a Dashboard. On resume the writer purges events at or after the resumed step,
so a run that crashed after its last checkpoint shows no duplicated or stale points.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from seq2seq.artifacts.run_dir import RunDir
from seq2seq.inference.translator import Translator
from seq2seq.train.progress_lines import ProgressLines


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
