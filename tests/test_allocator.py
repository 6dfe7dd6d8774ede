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
