"""Run the console scripts on tcmalloc when the system has it (`apt install libtcmalloc-minimal4`).

What this module does to a process, and when: nothing on import. `relaunch_with_tcmalloc()` is called
explicitly, as the first thing the console scripts do (`seq2seq/cli/launch.py`; `python -m
seq2seq.cli.train`, as torchrun starts it, at the top of that module) and by the benchmark scripts.
When the process was started as the command, tcmalloc is installed and not loaded yet, it re-executes
the same command line (same PID, so torchrun and shells see the same process) with tcmalloc added to
LD_PRELOAD. The re-launched process, in the same call, at once puts LD_PRELOAD back the way the user
had it (remembered in _SEQ2SEQ_LD_PRELOAD for that one exec): only that process runs on tcmalloc, and
what it starts (tokenizer workers, subprocesses, a user's hooks) sees the user's own environment.
SEQ2SEQ_ALLOCATOR=system turns all of this off.

Why: every training batch has a new shape, so a step's large tensors come in sizes that never repeat.
glibc's malloc either keeps them on its heap, where they fragment it and memory grows over a run, or,
with a fixed mmap threshold, maps and unmaps them every time, paying a page fault per 4 KB. tcmalloc
keeps freed blocks in size classes and reuses them: faster and smaller (docs/performance.md).
The allocator has to be chosen before the process starts (LD_PRELOAD), hence the re-launch, and it
comes before torch is imported, which would otherwise be imported twice.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
from collections.abc import MutableMapping
from typing import Any

SWITCH = "SEQ2SEQ_ALLOCATOR"  # "system" keeps the C library's malloc
# Set only for the exec of the re-launch: the user's LD_PRELOAD as JSON (null when it was unset).
USER_PRELOAD = "_SEQ2SEQ_LD_PRELOAD"


def relaunch_wanted(environ: dict[str, str]) -> bool:
    """Not turned off, and not preloaded yet (which also ends the re-execution after one round)."""
    return environ.get(SWITCH) != "system" and "tcmalloc" not in environ.get("LD_PRELOAD", "")


def tcmalloc_environment(environ: dict[str, str], library: str | None) -> dict[str, str] | None:
    """The environment to re-execute with, or None to carry on as we are: tcmalloc not found,
    turned off, or already preloaded."""
    if library is None or not relaunch_wanted(environ):
        return None
    return {**environ, "LD_PRELOAD": f"{environ.get('LD_PRELOAD', '')} {library}".strip()}


def remember_user_preload(environment: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """`environment` (what the re-launch runs with) plus the LD_PRELOAD of `environ` (the user's)."""
    return {**environment, USER_PRELOAD: json.dumps(environ.get("LD_PRELOAD"))}


def restore_user_preload(environ: MutableMapping[str, str]) -> None:
    """In the re-launched process: LD_PRELOAD as the user had it (tcmalloc is loaded by now, and the
    loader reads LD_PRELOAD only when a program starts), and no trace of the re-launch."""
    preload = json.loads(environ.pop(USER_PRELOAD))
    if preload is None:
        environ.pop("LD_PRELOAD", None)
    else:
        environ["LD_PRELOAD"] = preload


def relaunch_with_tcmalloc(command: str, module: str) -> None:
    """Re-executes this process with tcmalloc preloaded, if it is installed and not loaded yet, and
    the process is the command (`command` on the PATH, or `python -m` / a path to `module`); in the
    re-executed process, restores the user's LD_PRELOAD for whatever it starts."""
    if USER_PRELOAD in os.environ:  # this is the re-launched process
        restore_user_preload(os.environ)
        return
    started_as_command = module == "__main__" or os.path.basename(sys.argv[0]) == command
    if not started_as_command or not sys.platform.startswith("linux"):
        return
    if not relaunch_wanted(dict(os.environ)) or _tcmalloc_mapped():
        return
    # find_library runs `ldconfig -p` (a subprocess), so only when a re-launch may follow.
    library = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    environment = tcmalloc_environment(dict(os.environ), library)
    if environment is None:
        return
    environment = remember_user_preload(environment, dict(os.environ))
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: closed by the shell (>&-), which the command reports itself
            stream.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environment)


def _tcmalloc_mapped() -> bool:
    """tcmalloc is loaded in this process already (re-launched, and LD_PRELOAD since restored)."""
    with open("/proc/self/maps") as maps:
        return "tcmalloc" in maps.read()


class FreeMemoryRelease:
    """glibc's malloc, where the process runs on it: every `every` calls of `tick`, the free pages of its
    heaps go back to the system (malloc_trim(0)). A training's tensors come in sizes that never repeat
    (see above); the heap keeps the space they freed, in pieces too scattered to reuse, and the process
    grows over a run on glibc where tcmalloc holds steady (docs/performance.md, "Allocator"). Returning
    them every few dozen updates keeps it near what the updates hold; the pages come back as one page
    fault each when a later update touches them, paid once per interval rather than per tensor (as a
    fixed mmap threshold would). A no-op on tcmalloc and where there is no glibc."""

    def __init__(self, every: int) -> None:
        self.every, self.calls = every, 0
        self.trim = _malloc_trim() if allocator_in_use() == "system" else None

    def tick(self) -> bool:
        """Counts a call; True when this one released the free memory."""
        self.calls += 1
        if self.trim is None or self.calls % self.every:
            return False
        self.trim(0)
        return True


def _malloc_trim() -> Any:
    """glibc's malloc_trim, or None (musl, macOS: no such function)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # the process's own symbols: the C library it runs on
    except (OSError, AttributeError):
        return None


def allocator_in_use() -> str:
    """ "tcmalloc" when this process has it mapped, else "system": what training logs at start, so a
    report can say what the run itself ran on (not what the process reading its log runs on)."""
    try:
        return "tcmalloc" if _tcmalloc_mapped() else "system"
    except OSError:  # no /proc (not Linux)
        return "system"
