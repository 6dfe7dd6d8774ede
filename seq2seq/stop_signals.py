"""SIGTERM and SIGHUP end a Python process without running any cleanup: a half-written cache build,
export or checkpoint would stay on disk forever. Around such writes they raise instead. Training
stops on them at its own pace: `stop_on_signals`."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def stop_signals_raise() -> Iterator[None]:
    """While the body runs, SIGTERM and SIGHUP raise SystemExit (status 128 + the signal, as the shell
    reports a killed process) instead of ending the process at once, so that its `except`/`finally`
    clauses remove what it was writing. Ctrl-C already raises KeyboardInterrupt. A handler someone
    else installed is left alone, and so is every signal outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    replaced = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(number) == signal.SIG_DFL:
            replaced[number] = signal.signal(number, _exit_on_signal)
    try:
        yield
    finally:
        for number, handler in replaced.items():
            signal.signal(number, handler)


def _exit_on_signal(number: int, frame: object) -> None:
    raise SystemExit(128 + number)


@contextlib.contextmanager
def stop_on_signals(request_stop: Callable[[int], None]) -> Iterator[None]:
    """While the body runs, Ctrl-C and SIGTERM call `request_stop(signal)`, which asks the work to stop
    where it can (training: after the update, with a save). Where it raises KeyboardInterrupt (a second
    Ctrl-C) the signal's default comes back, so a third one ends the process at once. The handlers that
    were there come back after the body: a program that trains through the Python API gets its Ctrl-C
    back, and what follows training (the exports) is interrupted as any code is."""

    def handler(signum: int, _frame: Any) -> None:
        try:
            request_stop(signum)
        except KeyboardInterrupt:
            signal.signal(signum, signal.SIG_DFL)
            raise

    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, earlier in previous.items():
            signal.signal(number, earlier)
