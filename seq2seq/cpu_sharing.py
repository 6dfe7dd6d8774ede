"""How this process's CPU threads wait, so that a machine shared with other work costs a fair share.

PyTorch and CTranslate2 run their CPU kernels on GNU OpenMP threads. Between two parallel regions a
waiting thread spins (300,000 rounds by default) before it sleeps. On an idle machine that saves a
wake-up; on a machine where another job holds a core, the spinning threads take the very core the
descheduled thread of the same region needs, and every region waits for it: training ran at 7-30% of
its idle speed beside one other job. A short spin (GOMP_SPINCOUNT=1000) keeps the idle speed and
gives a shared machine its fair share (docs/performance.md, "Shared machines", has the figures).

`prepare_this_process()` is called when the package is imported (seq2seq/__init__.py), before torch
or ctranslate2 load libgomp, which reads the variables once, as it loads. A user's own
OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is.

It also loads ctranslate2, which carries a libgomp of its own, before PyTorch's OpenMP threads run:
loaded after them, CTranslate2 decoded about 10x slower for the rest of the process
(docs/performance.md, "Both engines in one process").
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import MutableMapping

SPIN_COUNT = "1000"
USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# Load average (1 minute) from which the machine is called shared at start: an idle 2-core machine
# reads 0.0-0.3; one other single-thread job alone brings it to ~1 within a minute.
SHARED_LOAD = 0.75


# Whether OpenMP was loaded (by torch or ctranslate2) before set_thread_waiting ran: then it was too late.
_openmp_loaded_first = False
# The 1-minute load average when the package was imported, before this process did any work of its own.
load_at_start: float | None = None


def set_thread_waiting(environ: MutableMapping[str, str]) -> None:
    """Short spinning for OpenMP's waiting threads, unless the user chose how they wait."""
    if not any(key in environ for key in USER_KEYS):
        environ["GOMP_SPINCOUNT"] = SPIN_COUNT


def prepare_this_process() -> None:
    """At import of the package: the load before this process works, and how its threads will wait."""
    global _openmp_loaded_first, load_at_start
    load_at_start = load_average()
    _openmp_loaded_first = "torch" in sys.modules or "ctranslate2" in sys.modules
    set_thread_waiting(os.environ)
    load_ctranslate2_early()


def load_ctranslate2_early() -> None:
    """Imports ctranslate2 (when installed) while PyTorch's OpenMP threads have not yet run."""
    with contextlib.suppress(ImportError):
        import ctranslate2  # noqa: F401


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return None


def describe(environ: MutableMapping[str, str], load: float | None, cores: int) -> str:
    """One log line: how loaded the machine looked at start (`load`, usually `load_at_start`) and how
    the threads wait on it."""
    if "OMP_WAIT_POLICY" in environ or environ.get("GOMP_SPINCOUNT") != SPIN_COUNT:
        chosen = ", ".join(f"{k}={environ[k]}" for k in USER_KEYS if k in environ)
        waiting = f"threads wait as the environment says ({chosen})"
    elif _openmp_loaded_first:
        waiting = "torch was imported before seq2seq, so OpenMP's threads spin as long as its default says"
    else:
        waiting = "waiting threads sleep after 1,000 spins (GOMP_SPINCOUNT), so other work keeps its cores"
    if load is None:
        return f"cpu: {cores} cores; {waiting}"
    if load < SHARED_LOAD:
        return f"cpu: {cores} cores, load average {load:.2f} at start (idle); {waiting}"
    share = cores / (cores + load)  # this process's threads among the others' that are runnable
    return (
        f"cpu: {cores} cores, load average {load:.2f} at start: shared with other work, expect roughly "
        f"{share:.0%} of the idle speed; {waiting}"
    )
