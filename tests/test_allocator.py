"""The re-launch on tcmalloc (`seq2seq.allocator`): when it happens, and that it really preloads."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from seq2seq.allocator import tcmalloc_environment

LIBRARY = "libtcmalloc_minimal.so.4"


def test_preloads_tcmalloc_after_what_was_preloaded_before() -> None:
    env = tcmalloc_environment({"PATH": "/bin", "LD_PRELOAD": "libfoo.so"}, LIBRARY)
    assert env == {"PATH": "/bin", "LD_PRELOAD": f"libfoo.so {LIBRARY}"}
    assert tcmalloc_environment({}, LIBRARY) == {"LD_PRELOAD": LIBRARY}


@pytest.mark.parametrize(
    ("environ", "library"),
    [
        ({}, None),  # not installed
        ({"SEQ2SEQ_ALLOCATOR": "system"}, LIBRARY),  # turned off
        ({"LD_PRELOAD": f"/usr/lib/{LIBRARY}"}, LIBRARY),  # already loaded: no second round
    ],
)
def test_carries_on_without_relaunching(environ: dict[str, str], library: str | None) -> None:
    assert tcmalloc_environment(environ, library) is None


@pytest.mark.skipif(ctypes.util.find_library("tcmalloc_minimal") is None, reason="tcmalloc is not installed")
def test_relaunched_process_runs_on_tcmalloc_with_its_own_arguments() -> None:
    """A process started as the command re-executes itself once, keeps its PID and arguments, and
    then has tcmalloc mapped; imported as a module (module name not __main__) it does nothing."""
    code = (
        "import os, sys; from seq2seq.allocator import relaunch_with_tcmalloc; "
        "print('start', os.getpid(), flush=True); relaunch_with_tcmalloc('x', sys.argv[1]); "
        "print('maps', 'tcmalloc' in open('/proc/self/maps').read(), sys.argv[1:])"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SEQ2SEQ_ALLOCATOR")}
    command = subprocess.run([sys.executable, "-c", code, "__main__", "more"], capture_output=True, text=True, env=env)
    lines = command.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == lines[1], command.stdout + command.stderr  # started twice, same PID
    assert lines[2] == "maps True ['__main__', 'more']"
    imported = subprocess.run(
        [sys.executable, "-c", code, "seq2seq.cli.train"], capture_output=True, text=True, env=env
    )
    assert imported.stdout.splitlines()[1:] == ["maps False ['seq2seq.cli.train']"]


def clean_environment(**extra: str) -> dict[str, str]:
    """This environment without any allocator setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "SEQ2SEQ_ALLOCATOR")}
    return {**env, **extra}


CHILD = "import os; print(repr(os.environ.get('LD_PRELOAD')), 'tcmalloc' in open('/proc/self/maps').read())"


@pytest.mark.skipif(ctypes.util.find_library("tcmalloc_minimal") is None, reason="tcmalloc is not installed")
@pytest.mark.parametrize("user_preload", [None, ctypes.util.find_library("m")])  # libm: harmless to preload
def test_only_the_relaunched_process_has_tcmalloc_preloaded(user_preload: str | None) -> None:
    """The re-launched process runs on tcmalloc, but the environment it passes on is the user's: a
    child it starts sees the user's LD_PRELOAD (or none) and no variable of the re-launch, and does
    not load tcmalloc. A second call in the re-launched process does not re-launch it again."""
    code = (
        "import os, subprocess, sys; from seq2seq.allocator import relaunch_with_tcmalloc; "
        "print('start', flush=True); relaunch_with_tcmalloc('x', '__main__'); relaunch_with_tcmalloc('x', '__main__'); "
        "print('maps', 'tcmalloc' in open('/proc/self/maps').read()); "
        "print('own', repr(os.environ.get('LD_PRELOAD')), sorted(k for k in os.environ if k.startswith('_SEQ2SEQ'))); "
        f"print('child', subprocess.run([sys.executable, '-c', {CHILD!r}], capture_output=True, text=True).stdout.strip())"
    )
    env = clean_environment(**({"LD_PRELOAD": user_preload} if user_preload else {}))
    command = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert command.stdout.splitlines() == [
        "start",
        "start",  # re-launched once, not again on the second call
        "maps True",
        f"own {user_preload!r} []",
        f"child {user_preload!r} False",
    ], command.stdout + command.stderr


@pytest.mark.skipif(ctypes.util.find_library("tcmalloc_minimal") is None, reason="tcmalloc is not installed")
@pytest.mark.parametrize(("command", "module"), [("seq2seq-train", "train"), ("seq2seq-translate", "translate")])
def test_importing_a_command_module_does_not_relaunch(command: str, module: str) -> None:
    """The re-launch is the console script's first call (seq2seq.cli.launch), not a side effect of
    importing the command's module, even in a process that looks like the command."""
    code = (
        f"import sys; sys.argv[0] = {command!r}; print('start', flush=True); import seq2seq.cli.{module}; "
        "print('maps', 'tcmalloc' in open('/proc/self/maps').read())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_environment())
    assert result.stdout.splitlines() == ["start", "maps False"], result.stdout + result.stderr


# A child on glibc's malloc: 3,000 blocks of 64 KB (under the mmap threshold: on the heap) written, all
# but every 16th freed, so that the kept ones pin the heap's top and the freed space stays resident.
SCATTERED_HEAP = """
import ctypes, sys
from seq2seq.allocator import FreeMemoryRelease
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) // 1024
blocks = [libc.malloc(1 << 16) for _ in range(3000)]
for block in blocks:
    ctypes.memset(block, 1, 1 << 16)
for i, block in enumerate(blocks):
    if i % 16:
        libc.free(block)
release = FreeMemoryRelease(every=int(sys.argv[1]))
before = rss_mb()
released = [release.tick() for _ in range(3)]
print(before, rss_mb(), released)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, /proc")
def test_free_heap_pages_go_back_to_the_system_every_nth_tick() -> None:
    """On glibc's malloc, the heap's freed pages are resident until released: the third tick of a
    release every 3 gives back nearly all of the ~176 MB freed (read from /proc, not from the code);
    a release every 4 has not yet, and keeps them."""
    env = clean_environment(SEQ2SEQ_ALLOCATOR="system")
    runs = {
        every: subprocess.run(
            [sys.executable, "-c", SCATTERED_HEAP, str(every)], capture_output=True, text=True, env=env
        )
        for every in (3, 4)
    }
    (before, after, released), (kept_before, kept_after, not_released) = (_parse(runs[every]) for every in (3, 4))
    assert released == [False, False, True] and not_released == [False, False, False]
    assert before - after > 150, runs[3].stdout  # of the ~176 MB freed
    assert kept_before - kept_after < 10, runs[4].stdout


def _parse(run: subprocess.CompletedProcess) -> tuple[int, int, list[bool]]:
    assert run.returncode == 0, run.stderr[-2000:]
    before, after, released = run.stdout.strip().split(" ", 2)
    return int(before), int(after), [flag == "True" for flag in released.strip("[]").split(", ")]
