"""seq2seq: encoder-decoder Transformers for sequence-to-sequence tasks, trained and decoded from Hydra configs."""

import os

from seq2seq.cpu_sharing import prepare_this_process

# oneDNN (PyTorch's CPU matmul library) caches one compiled kernel per matrix shape, and token-bucket
# batches have a new shape almost every update: 64 entries keep memory flat for a few % of speed
# (docs/performance.md, "oneDNN's kernel cache"). Set the variable yourself to override.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

# Before torch or ctranslate2 load OpenMP: short spinning, so a shared machine costs its share and no
# more (seq2seq/cpu_sharing.py). A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
prepare_this_process()
