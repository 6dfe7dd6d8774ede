"""Training progress as plain lines, for a stream that is not a terminal (a file, a pipe, CI logs).

tqdm redraws its bar with carriage returns: redirected to a file, every redraw stays there (141 KB for the
built-in demo), and the next log line starts glued to the last bar. A line every `interval` seconds, each
ending in a newline, says the same in a file that reads top to bottom.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

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
