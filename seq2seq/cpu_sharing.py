"""How this process's CPU threads wait, so that a machine shared with other work costs a fair share.

PyTorch and CTranslate2 run their CPU kernels on GNU OpenMP threads. Between two parallel regions a
waiting thread spins for a long while (libgomp's default) before it sleeps. On an idle machine that
saves a wake-up, and it is the fastest way to wait: a short spin made both training and PyTorch's
decoding slower on an idle machine. On a machine where another job holds a core, the spinning threads
take the very core the descheduled thread of the same region needs, and every region waits for it:
beside one other job, training kept a far smaller share of its idle speed with the long spin than with
a short one (GOMP_SPINCOUNT=1000). The figures are in docs/performance.md, "Shared machines"; they stay
there, with the machine and date they belong to, rather than here.

So the choice is made per process, by a measurement at start: `prepare_this_process()` runs when a
command starts its work (seq2seq/startup.py), before torch or ctranslate2 load libgomp, which reads the
variables once, as it loads. It counts the threads of other processes that are running (/proc/loadavg,
a few samples a few milliseconds apart): with other work running it sets the short spin; on an idle
machine it keeps libgomp's default. A job that arrives later finds long-spinning threads, which cannot
be changed any more: `SharingWatch` notices the other work's CPU time, and training (between updates)
and the server (between batches) run on the threads it leaves room for while it lasts (one on two
cores: one thread has no parallel regions to wait in). A user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT
is left as it is.

It also loads ctranslate2, which carries a libgomp of its own, before PyTorch's OpenMP threads run:
loaded after them, CTranslate2 decoded many times slower for the rest of the process
(docs/performance.md, "Both engines in one process", has the measurement).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, MutableMapping

SPIN_COUNT = "1000"
USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# Set beside our own GOMP_SPINCOUNT, so that a child process (a training started by reproduce.py, a
# DDP rank) measures its own machine state instead of taking the parent's choice for the user's.
OURS = "SEQ2SEQ_SET_GOMP_SPINCOUNT"
# Mean number of other processes' running threads from which the machine is called shared: one busy
# single-thread job reads ~1; an idle machine 0-0.2 (a daemon waking now and then).
SHARED_THREADS = 0.5
# SharingWatch: other work's CPU use (in cores, over its window) from which a long-spinning process
# gives the other work room (one thread, on two cores), and the use below which it takes its threads back.
BUSY_CORES, QUIET_CORES = 0.5, 0.25

# Whether OpenMP was loaded (by torch or ctranslate2) before set_thread_waiting ran: then it was too late.
_openmp_loaded_first = False
# The 1-minute load average when the package was imported, before this process did any work of its own.
load_at_start: float | None = None
# Other processes' running threads when the package was imported (None: not measurable, not Linux).
others_at_start: float | None = None
# How this process's OpenMP threads wait: "user" (the environment said), "short" or "long" (libgomp's
# default, chosen on an idle machine).
waiting = "short"


def running_threads() -> int | None:
    """Threads running or ready to run on the whole machine now, this one included (Linux)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def others_running(
    samples: int = 10, interval: float = 0.005, read: Callable[[], int | None] = running_threads
) -> float | None:
    """Mean number of other processes' threads running, over `samples` reads `interval` s apart. At
    import this process runs one thread, the reading one, which every read counts."""
    counts = []
    for i in range(samples):
        if (running := read()) is None:
            return None
        counts.append(max(running - 1, 0))
        if i + 1 < samples:
            time.sleep(interval)
    return sum(counts) / len(counts)


def is_shared(others: float | None, threads: int, cores: int) -> bool:
    """Whether other work running now (`others` threads; None: unknown) and this process's `threads`
    want more than the `cores`: then a spinning thread takes a core another needs. Unknown counts as
    shared: a short spin on an idle machine cost far less than a long one beside a job (the figures:
    docs/performance.md, "Measurements behind the code")."""
    return others is None or (others >= SHARED_THREADS and others + threads > cores)


def expected_threads(environ: MutableMapping[str, str], cores: int) -> int:
    """The threads PyTorch will start with: OMP_NUM_THREADS (torchrun sets 1 per rank), else one a core."""
    try:
        return max(int(environ["OMP_NUM_THREADS"]), 1)
    except (KeyError, ValueError):
        return cores


def users_choice(environ: MutableMapping[str, str]) -> bool:
    """Whether the user set how OpenMP's threads wait. A setting a parent process of ours made is
    removed first: this process chooses afresh."""
    if environ.pop(OURS, None) is not None:
        environ.pop("GOMP_SPINCOUNT", None)
    return any(key in environ for key in USER_KEYS)


def set_thread_waiting(environ: MutableMapping[str, str], shared: bool) -> str:
    """Chooses how OpenMP's threads will wait on a machine `shared` with other work or not; returns
    the choice ("user", "short" or "long")."""
    if users_choice(environ):
        return "user"
    if not shared:
        return "long"
    environ["GOMP_SPINCOUNT"] = SPIN_COUNT
    environ[OURS] = "1"
    return "short"


def prepare_this_process() -> None:
    """At a command's start (seq2seq/startup.py): the load before this process works, and how its
    threads will wait."""
    global _openmp_loaded_first, load_at_start, others_at_start, waiting
    load_at_start = load_average()
    _openmp_loaded_first = "torch" in sys.modules or "ctranslate2" in sys.modules
    others_at_start = None if users_choice(os.environ) else others_running()  # the user's choice: no need
    cores = usable_cores()
    waiting = set_thread_waiting(os.environ, is_shared(others_at_start, expected_threads(os.environ, cores), cores))
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


def describe(environ: MutableMapping[str, str], how: str, others: float | None, load: float | None, cores: int) -> str:
    """One log line: how busy the machine was at start (`others`: other processes' running threads;
    `load`: the 1-minute load average) and how this process's threads wait (`how`, see `waiting`)."""
    if how == "user":
        chosen = ", ".join(f"{k}={environ[k]}" for k in USER_KEYS if k in environ)
        wait = f"threads wait as the environment says ({chosen})"
    elif _openmp_loaded_first:
        wait = "torch was imported before the command set up the process, so OpenMP's threads spin long"
    elif how == "long":
        wait = "OpenMP's threads spin as long as libgomp's default, the fastest on an idle machine"
    else:
        wait = "waiting threads sleep after 1,000 spins (GOMP_SPINCOUNT), so other work keeps its cores"
    state = "" if load is None else f"load average {load:.2f}"
    if others is None:
        return f"cpu: {cores} cores{', ' + state if state else ''}; {wait}"
    if others < SHARED_THREADS:
        return f"cpu: {cores} cores, idle at start ({state}, {others:.1f} other threads running); {wait}"
    if how == "long":  # other work, but cores to spare for it and this process's threads
        return f"cpu: {cores} cores, {others:.1f} other threads running at start ({state}), cores to spare; {wait}"
    share = cores / (cores + others)  # this process's threads among the others' that are runnable
    return (
        f"cpu: {cores} cores, {others:.1f} other threads running at start ({state}): shared with other "
        f"work, expect roughly {share:.0%} of the idle speed; {wait}"
    )


def describe_this_process() -> str:
    return describe(os.environ, waiting, others_at_start, load_at_start, usable_cores())


def busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent working since boot (/proc/stat; steal and idle excluded)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds this process's work has used: its threads, the children it has waited for, and the
    descendants still running (Inductor's compile workers and the C++ compiler they start, a
    tokenizer's pool) with the children they have waited for. Counted as other work, a compile's
    workers would make training give up a thread mid-compile, and a compiled update recompile for it."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system + _descendants_seconds()


def _descendants_seconds() -> float:
    """CPU seconds of this process's living descendants and of the children they waited for
    (/proc/<pid>/stat's utime, stime, cutime, cstime); 0 where /proc cannot be read."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                after_name = f.read().rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
        except (OSError, IndexError):
            continue  # gone since it was listed
        pid = int(name)
        parents[pid] = int(after_name[1])
        ticks[pid] = sum(int(field) for field in after_name[11:15])
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0, list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += ticks[pid]
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


class SharingWatch:
    """While this process's threads spin long (it started on an idle machine), watches the CPU time the
    rest of the machine uses. When other work takes `BUSY_CORES` or more over a window of
    `every_seconds` and it and our threads want more than the cores, runs on the threads the other
    work leaves room for (one, on two cores: no parallel region, so nothing spins for a descheduled
    thread) until the other work drops below `QUIET_CORES`. Call `check()` between units of work (an
    update, a batch); it returns a line for the log when it changes the threads."""

    def __init__(
        self,
        threads: int,
        set_threads: Callable[[int], None],
        every_seconds: float = 5.0,
        cores: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        machine_seconds: Callable[[], float | None] = busy_seconds,
        process_seconds: Callable[[], float] = own_seconds,
    ) -> None:
        self.threads = self.current = threads
        self.set_threads, self.every = set_threads, every_seconds
        self.cores = cores or usable_cores()
        self.clock, self.machine_seconds, self.process_seconds = clock, machine_seconds, process_seconds
        self._mark = self._sample()

    def _sample(self) -> tuple[float, float, float] | None:
        machine = self.machine_seconds()
        return None if machine is None else (self.clock(), machine, self.process_seconds())

    def check(self) -> str | None:
        if self._mark is None or self.clock() - self._mark[0] < self.every:
            return None
        now = self._sample()
        if now is None:
            return None
        wall, machine, own = (b - a for a, b in zip(self._mark, now, strict=True))
        if wall <= 0:
            return None
        self._mark = now
        others = max(machine - own, 0.0) / wall
        if others >= BUSY_CORES and others + self.current > self.cores + 0.5:
            room = max(1, min(self.threads, int(self.cores - others + 0.5)))
            if room < self.current:
                self.current = room
                self.set_threads(room)
                return (
                    f"cpu: other work is using {others:.1f} of {self.cores} cores; running on {room} "
                    f"thread{'s' if room > 1 else ''} while it lasts (this process started on an idle "
                    f"machine, so its OpenMP threads spin long)"
                )
        elif self.current < self.threads and others < QUIET_CORES:
            self.current = self.threads
            self.set_threads(self.threads)
            return f"cpu: the other work stopped ({others:.1f} cores); back to {self.threads} threads"
        return None


def watch_for_sharing(threads: int, set_threads: Callable[[int], None]) -> SharingWatch | None:
    """A SharingWatch where it can help: long-spinning threads (our choice, not the user's), several."""
    spins_long = waiting == "long" or (waiting == "short" and _openmp_loaded_first)  # set too late
    if not spins_long or threads < 2:
        return None
    return SharingWatch(threads, set_threads)
