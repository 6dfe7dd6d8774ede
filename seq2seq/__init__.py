"""seq2seq: encoder-decoder Transformers for sequence-to-sequence tasks, trained and decoded from Hydra configs."""

import os

from seq2seq.cpu_sharing import prepare_this_process

# oneDNN (PyTorch's CPU matmul library) caches one compiled kernel per matrix shape, 1024 by default.
# Token-bucket batches have a new shape almost every update, and with bf16 kernels the cache grew a
# training process to 10 GB of RSS after 1,900 updates of the small model. 64 entries cost ~3% speed
# (measured: 2,724 -> 2,631 target tok/s) and keep memory flat. Set the variable yourself to override.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")

# Before torch or ctranslate2 load OpenMP: short spinning, so a shared machine costs its share and no
# more (seq2seq/cpu_sharing.py). A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
prepare_this_process()
