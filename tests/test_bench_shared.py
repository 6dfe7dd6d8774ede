"""scripts/competing_load.py and scripts/bench_shared.py: the competing jobs really load the machine
and are gone afterwards; the summary's ratios are loaded over idle for each way of waiting."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_shared import summary  # noqa: E402
from competing_load import competing_jobs  # noqa: E402


def children_cpu_seconds() -> float:
    """CPU time of this process's finished and waited-for children (the jobs, once stopped)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def running_children_cpu_seconds(leaving_out: set[int] = frozenset()) -> dict[int, float]:
    """CPU time of each running child of this process but those `leaving_out`, from /proc
    (RUSAGE_CHILDREN counts a child only once it has been waited for)."""
    tick = os.sysconf("SC_CLK_TCK")
    children = {}
    for task in Path("/proc/self/task").iterdir():
        for pid in set((task / "children").read_text().split()) - {str(pid) for pid in leaving_out}:
            with contextlib.suppress(OSError):  # it ended meanwhile
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                children[int(pid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return children


def test_competing_jobs_use_cpu_while_running_and_stop_after() -> None:
    """Regression: the job was given 3 s of wall time and had to use 1 s of CPU in it, which a busy
    machine does not give it (0.77 s at load 6-9). It is given CPU time to use, however long that takes."""
    before = children_cpu_seconds()
    # Children an earlier test left (multiprocessing's resource tracker, alive until the process ends,
    # once a test has used mp.spawn) are not the job's: pytest-xdist runs the files in another order.
    earlier = set(running_children_cpu_seconds())
    with competing_jobs(1, threads=1, settle_seconds=0.0) as record:
        deadline = time.monotonic() + 120.0
        while sum((running := running_children_cpu_seconds(earlier)).values()) < 1.0:  # imports + busy matmuls
            assert time.monotonic() < deadline, f"the competing job used {running} s of CPU in 120 s"
            time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in running)  # stopped, and waited for
    used = children_cpu_seconds() - before
    assert used > 1.0, f"the competing job used {used:.2f} s of CPU"
    assert record["competing_jobs"] == 1 and "load_average_1min_at_end" in record
    with competing_jobs(0) as nothing:
        pass
    assert nothing == {"competing_jobs": 0, "competing_threads_each": 2}


def test_the_summary_is_the_median_of_rounds_and_loaded_over_idle() -> None:
    rows = [
        {"round": r, "wait": w, "competing_jobs": j, "train_tgt_tokens_per_s": v}
        for r, w, j, v in [
            (1, "a", 0, 100.0), (1, "a", 1, 40.0), (2, "a", 0, 120.0), (2, "a", 1, 60.0),
            (1, "b", 0, 100.0), (1, "b", 1, 10.0), (2, "b", 0, 100.0), (2, "b", 1, 10.0),
        ]
    ]  # fmt: skip
    result = summary(rows, compete=1)
    assert result["a"]["train_tgt_tokens_per_s"] == {"idle": 110.0, "competing": 50.0, "kept": round(50 / 110, 3)}
    assert result["b"]["train_tgt_tokens_per_s"]["kept"] == 0.1
