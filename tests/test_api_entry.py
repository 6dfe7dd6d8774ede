"""The Python API's ways in (`seq2seq.inference`): `load`, the one that picks the engine as the commands
do, is exported; and a class reached through its own module behaves as the one reached through the
package: the process is prepared (oneDNN's kernel cache, OpenMP's waiting) before torch loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PREPARED = "import os, sys; print(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY'), 'torch' in sys.modules)"


@pytest.mark.parametrize(
    "statement",
    [
        "from seq2seq.inference import Translator",
        "from seq2seq.inference.translator import Translator",  # was: torch loaded, nothing prepared
        "from seq2seq.inference import CTranslate2Translator; CTranslate2Translator.load",
    ],
)
def test_every_way_to_the_engines_prepares_the_process_first(statement):
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    done = subprocess.run(
        [sys.executable, "-c", f"{statement}; {PREPARED}"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    capacity, torch_loaded = done.stdout.split()
    pytorch = "CTranslate2" not in statement
    assert torch_loaded == str(pytorch)
    assert capacity == ("64" if pytorch else "None")  # CTranslate2's engine prepares as it loads one


def test_load_prepares_the_process_as_it_loads_an_engine_not_on_import(tmp_path):
    code = "from seq2seq.inference import load; import os, sys; print(os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY'), 'torch' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["None", "False"], done.stderr


def test_load_is_the_packages_own():
    import seq2seq.inference as api
    from seq2seq.inference.loading import load

    assert api.load is load and "load" in api.__all__
    assert api.load is load  # still the function once its module is imported
