"""What a command does to its process before torch or ctranslate2 load: the settings those libraries
read once, as they load. Called by each command after its config is checked (a config error answers
without it) and by the Python API's first use (seq2seq.inference); never on import of the package."""

from __future__ import annotations

import os

from seq2seq import cpu_sharing

_prepared = False


def prepare_process() -> None:
    """Once per process, before torch or ctranslate2 are imported: oneDNN's kernel cache and how the
    OpenMP threads wait (which also loads ctranslate2 first; seq2seq/cpu_sharing.py)."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    # oneDNN (PyTorch's CPU matmul library) caches one compiled kernel per matrix shape, and token-bucket
    # batches have a new shape almost every update: 64 entries keep memory flat for a few % of speed
    # (docs/performance.md, "oneDNN's kernel cache"). Set the variable yourself to override.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
    # Short spinning where the machine is shared, so it costs its share and no more. A user's
    # OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
    cpu_sharing.prepare_this_process()
