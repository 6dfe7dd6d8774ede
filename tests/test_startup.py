"""What a command does to its process, and when (seq2seq/startup.py): nothing on `import seq2seq`, and a
config error answered before torch, ctranslate2 or transformers is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# One fresh interpreter runs every command's main with a bad command line, in process, and reports what
# was imported and set; each error is the command's own one-line answer (exit status 2).
SCRIPT = """
import json, os, sys
before = dict(os.environ)
import seq2seq
imported = {"seq2seq": sorted(m for m in ("torch", "ctranslate2") if m in sys.modules)}
changed = {"seq2seq": sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k))}
from seq2seq.cli import average, export, launch

commands = {
    "seq2seq-train": (launch.train, ["max_steps=0", "hydra.run.dir=RUN"]),
    "seq2seq-translate": (launch.translate, ["run=r", "beam=0"]),
    "seq2seq-serve": (launch.serve, ["run=r", "port=70000"]),
    "seq2seq-average": (average.main, ["run=r", "last=0"]),
    "seq2seq-export": (export.main, ["run=r", "output=o", "format=onnx"]),
    "seq2seq-distill": (launch.distill, ["teacher=t", "output=RUN", "beam=0"]),
}
status = {}
for name, (main, argv) in commands.items():
    sys.argv = [name + "-under-test", *[a.replace("RUN", sys.argv[1]) for a in argv]]
    try:
        main()
    except SystemExit as stop:
        status[name] = stop.code
heavy = sorted(m for m in ("torch", "ctranslate2", "transformers") if m in sys.modules)
print(json.dumps({"imported": imported, "changed": changed, "status": status, "heavy": heavy}))
"""


def test_config_errors_answer_before_torch_and_importing_the_package_does_nothing(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["imported"] == {"seq2seq": []} and report["changed"] == {"seq2seq": []}
    assert report["status"] == dict.fromkeys(
        ["seq2seq-train", "seq2seq-translate", "seq2seq-serve", "seq2seq-average", "seq2seq-export", "seq2seq-distill"],
        2,
    )
    assert done.stderr.splitlines() == [
        "error: config error: max_steps=0: must be positive or null",
        "error: config error: beam=0: must be positive",
        "error: config error: port=70000: must be in [0, 65535] (0 picks a free port)",
        "error: last=0: must be at least 1",
        "error: config error: format='onnx': must be one of safetensors, ctranslate2, huggingface, argos",
        "error: config error: beam=0: must be positive",
    ]
    assert report["heavy"] == []
    assert not (tmp_path / "run").exists()


def test_probing_the_inference_package_for_other_names_prepares_nothing() -> None:
    code = (
        "import os, sys; before = dict(os.environ); import seq2seq.inference as api; "
        "assert not hasattr(api, '__wrapped__'); "
        "print(sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
