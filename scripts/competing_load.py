"""Other work on the machine, started and stopped by a benchmark: `with competing_jobs(1, threads=2):`.

Each job is a separate Python process running PyTorch matrix products on `threads` threads with
OpenMP's default waiting (as another user's training or inference would: our GOMP_SPINCOUNT is
removed from its environment), until the benchmark stops it. The JSON of a benchmark records how
many jobs ran, their threads, and the load average they made.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator

JOB = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(512, 512), torch.randn(512, 512)
while True:
    torch.relu(a @ b).sum(0)
"""


@contextlib.contextmanager
def competing_jobs(count: int, threads: int = 2, settle_seconds: float = 3.0) -> Iterator[dict]:
    """Runs `count` competing jobs for the duration of the block; yields a dict that holds, after the
    block, the load average the jobs left (`load_average_1min_at_end`)."""
    record: dict = {"competing_jobs": count, "competing_threads_each": threads}
    if count == 0:
        yield record
        return
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    jobs = [
        subprocess.Popen([sys.executable, "-c", JOB, str(threads)], env=env, stdout=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        time.sleep(settle_seconds)  # the jobs' imports are done and they compute when the timing starts
        yield record
        record["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    finally:
        for job in jobs:
            job.kill()
            job.wait()
