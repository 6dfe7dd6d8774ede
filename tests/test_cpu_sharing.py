"""How CPU threads wait (seq2seq/cpu_sharing.py): chosen at import from the other work running then
(libgomp's long spin on an idle machine, a short one beside other work, the user's choice above both),
set before OpenMP loads, said in the log; and one thread while other work arrives later."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time

import pytest
import torch

from seq2seq import cpu_sharing
from seq2seq.cpu_sharing import OURS, SharingWatch


def test_an_idle_machine_keeps_libgomps_long_spin() -> None:
    environ: dict[str, str] = {}
    assert cpu_sharing.set_thread_waiting(environ, shared=False) == "long"
    assert environ == {}


def test_other_work_at_start_gets_the_short_spin() -> None:
    environ: dict[str, str] = {}
    assert cpu_sharing.set_thread_waiting(environ, shared=True) == "short"
    assert environ == {"GOMP_SPINCOUNT": "1000", OURS: "1"}


@pytest.mark.parametrize(
    ("others", "threads", "cores", "shared"),
    [
        (0.1, 2, 2, False),  # a daemon waking now and then
        (1.0, 2, 2, True),  # one busy thread beside our two, on two cores
        (1.0, 8, 16, False),  # a DDP rank of 8 threads beside another rank's import: cores to spare
        (None, 2, 2, True),  # not measurable: the choice that is safe on a shared machine
    ],
)
def test_shared_means_more_runnable_threads_than_cores(others, threads, cores, shared) -> None:
    assert cpu_sharing.is_shared(others, threads, cores) is shared


def test_the_threads_pytorch_will_start_with() -> None:
    assert cpu_sharing.expected_threads({"OMP_NUM_THREADS": "1"}, 16) == 1  # torchrun's per-rank default
    assert cpu_sharing.expected_threads({}, 16) == 16
    assert cpu_sharing.expected_threads({"OMP_NUM_THREADS": "x"}, 4) == 4


@pytest.mark.parametrize("user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "300000"}])
def test_the_users_choice_is_kept(user: dict[str, str]) -> None:
    environ = dict(user)
    assert cpu_sharing.set_thread_waiting(environ, shared=True) == "user"
    assert environ == user
    line = cpu_sharing.describe(environ, "user", None, 0.1, 2)
    assert "as the environment says" in line and next(iter(user)) in line


def test_a_child_process_chooses_afresh_what_its_parent_chose() -> None:
    """The parent's short spin travels in the environment; the child's machine may be idle by then."""
    environ = {"GOMP_SPINCOUNT": "1000", OURS: "1"}
    assert cpu_sharing.set_thread_waiting(environ, shared=False) == "long"
    assert environ == {}


def test_other_running_threads_are_counted_without_the_reader() -> None:
    reads = iter([1, 3, 3, 1])  # /proc/loadavg's running count includes the thread that reads it
    assert cpu_sharing.others_running(samples=4, interval=0, read=lambda: next(reads)) == 1.0
    assert cpu_sharing.others_running(samples=4, interval=0, read=lambda: None) is None


@contextlib.contextmanager
def busy_process():
    """Another process keeping one core busy, running before the block starts."""
    job = subprocess.Popen([sys.executable, "-c", "print(flush=True)\nwhile True: pass"], stdout=subprocess.PIPE)
    try:
        job.stdout.readline()  # its interpreter is up and about to spin
        time.sleep(0.2)
        yield
    finally:
        job.kill()
        job.wait()


@pytest.mark.skipif(cpu_sharing.running_threads() is None, reason="/proc/loadavg is Linux's")
def test_preparing_the_process_beside_a_busy_process_sets_the_short_spin_before_torch_loads() -> None:
    """In a fresh process: the command's preparation first, then torch; libgomp reads the variable when
    torch loads it."""
    env = {k: v for k, v in os.environ.items() if k not in (*cpu_sharing.USER_KEYS, OURS, "OMP_NUM_THREADS")}
    code = (
        "import os, sys; from seq2seq import cpu_sharing as c; from seq2seq.startup import prepare_process; "
        "prepare_process(); assert 'torch' not in sys.modules; "
        "print(os.environ.get('GOMP_SPINCOUNT'), c.waiting, c.others_at_start)"
    )
    with busy_process():
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    spin, how, others = out.stdout.split()
    assert (spin, how) == ("1000", "short") and float(others) >= cpu_sharing.SHARED_THREADS, out.stdout


def test_preparing_the_process_loads_ctranslate2_before_torch_runs() -> None:
    """ctranslate2's own libgomp, loaded after PyTorch's OpenMP threads had run, decoded ~10x slower
    (docs/performance.md): a command's preparation loads it first, without loading torch."""
    pytest.importorskip("ctranslate2")
    code = (
        "import sys; from seq2seq.startup import prepare_process; prepare_process(); "
        "print('ctranslate2' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_the_log_says_whether_the_machine_looked_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a command, which prepares its process before torch loads (in this test process an earlier
    # test may have prepared it after, through the Python API).
    monkeypatch.setattr(cpu_sharing, "_openmp_loaded_first", False)
    environ = {"GOMP_SPINCOUNT": "1000"}
    idle = cpu_sharing.describe({}, "long", 0.1, 0.2, 2)
    assert "idle at start (load average 0.20, 0.1 other threads running)" in idle and "libgomp's default" in idle
    shared = cpu_sharing.describe(environ, "short", 2.0, 1.5, 2)
    assert "2.0 other threads running at start (load average 1.50): shared" in shared
    assert "roughly 50% of the idle speed" in shared and "1,000 spins" in shared  # 2 / (2 + 2)
    assert cpu_sharing.describe(environ, "short", None, None, 2).startswith("cpu: 2 cores;")
    roomy = cpu_sharing.describe({}, "long", 1.0, 1.0, 16)  # a big machine: the long spin, and why
    assert "1.0 other threads running at start (load average 1.00), cores to spare" in roomy and "shared" not in roomy


class FakeMachine:
    """Clock and CPU counters a test drives: `others` cores busy besides this process's `own`."""

    def __init__(self) -> None:
        self.now = self.machine = self.own = 0.0

    def run(self, seconds: float, others: float, own: float = 2.0) -> None:
        self.now += seconds
        self.machine += (others + own) * seconds
        self.own += own * seconds


def fake_watch(machine: FakeMachine, threads_set: list[int]) -> SharingWatch:
    return SharingWatch(
        2, threads_set.append, every_seconds=10, cores=2, clock=lambda: machine.now,
        machine_seconds=lambda: machine.machine, process_seconds=lambda: machine.own,
    )  # fmt: skip


def test_other_work_arriving_later_sends_training_to_one_thread_and_back() -> None:
    machine, threads_set = FakeMachine(), []
    watch = fake_watch(machine, threads_set)
    machine.run(5, others=1.5)
    assert watch.check() is None and threads_set == []  # not a whole window yet
    machine.run(5, others=1.5)
    assert "other work is using 1.5 of 2 cores; running on 1 thread" in watch.check() and threads_set == [1]
    machine.run(10, others=0.3, own=1.0)  # between the two bounds: stays as it is
    assert watch.check() is None and threads_set == [1]
    machine.run(10, others=0.1, own=1.0)
    assert "back to 2 threads" in watch.check() and threads_set == [1, 2]


def test_on_many_cores_it_leaves_the_other_work_the_cores_it_uses() -> None:
    machine, threads_set = FakeMachine(), []
    watch = SharingWatch(
        16, threads_set.append, every_seconds=10, cores=16, clock=lambda: machine.now,
        machine_seconds=lambda: machine.machine, process_seconds=lambda: machine.own,
    )  # fmt: skip
    machine.run(10, others=2.0, own=16.0)
    assert "running on 14 threads" in watch.check() and threads_set == [14]


def test_this_processs_own_threads_are_not_other_work() -> None:
    machine, threads_set = FakeMachine(), []
    watch = fake_watch(machine, threads_set)
    machine.run(10, others=0.2, own=2.0)
    assert watch.check() is None and threads_set == []


def test_the_watch_reads_another_processs_cpu_time_from_the_machine() -> None:
    """The real counters: /proc/stat's busy time less this process's own (os.times) is the other work."""
    if cpu_sharing.busy_seconds() is None:
        pytest.skip("/proc/stat is Linux's")
    threads_set: list[int] = []
    with busy_process():
        watch = SharingWatch(2, threads_set.append, every_seconds=1.0, cores=2)
        time.sleep(1.2)
        line = watch.check()
    assert threads_set == [1], line  # the busy process alone is ~1 core, over the 0.5 bound


@pytest.mark.parametrize(
    ("how", "loaded_first", "threads", "watches"),
    [("long", False, 2, True), ("short", False, 2, False), ("user", False, 2, False), ("long", False, 1, False),
     ("short", True, 2, True)],  # torch loaded before seq2seq: the short spin came too late
)  # fmt: skip
def test_a_watch_only_where_threads_spin_long(monkeypatch, how, loaded_first, threads, watches) -> None:
    monkeypatch.setattr(cpu_sharing, "waiting", how)
    monkeypatch.setattr(cpu_sharing, "_openmp_loaded_first", loaded_first)
    assert (cpu_sharing.watch_for_sharing(threads, lambda n: None) is not None) is watches


def test_training_narrows_to_one_thread_when_other_work_arrives(tmp_path, monkeypatch) -> None:
    from conftest import TINY_TRAIN, compose_config, train_logging

    start = time.monotonic()
    fast_watch = lambda threads, set_threads: SharingWatch(  # noqa: E731
        threads,
        set_threads,
        every_seconds=0.0,
        cores=2,
        machine_seconds=lambda: time.monotonic() - start,
        process_seconds=lambda: 0.0,
    )  # the fake machine: other work takes one core from the start
    monkeypatch.setattr(cpu_sharing, "watch_for_sharing", fast_watch)
    threads = torch.get_num_threads()
    try:
        cfg = compose_config("train", [*TINY_TRAIN, "max_steps=3", "device=cpu", "threads=2"])
        _, lines = train_logging(cfg, tmp_path / "run")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert any("running on 1 thread while it lasts" in line for line in lines), lines


def test_training_logs_it(tmp_path, monkeypatch) -> None:
    from conftest import TINY_TRAIN, compose_config, train_logging

    monkeypatch.setattr(cpu_sharing, "others_at_start", 3.0)
    monkeypatch.setattr(cpu_sharing, "waiting", "short")
    # device=cpu: the line is about the CPU's cores, and a run on a GPU does not print it
    _, lines = train_logging(compose_config("train", [*TINY_TRAIN, "max_steps=2", "device=cpu"]), tmp_path / "run")
    assert any(line.startswith("cpu: ") and "3.0 other threads running at start" in line for line in lines), lines


# ("long", 1.0): other work ran, but with cores to spare the long spin was kept: nothing to say
@pytest.mark.parametrize(
    ("how", "others", "logged"), [("short", 2.0, True), ("long", 0.0, False), ("long", 1.0, False)]
)
def test_seq2seq_translate_says_when_the_machine_was_shared_at_start(
    tmp_path, monkeypatch, caplog, how, others, logged
) -> None:
    from conftest import TINY_TRAIN, compose_config, train_logging
    from omegaconf import OmegaConf

    from seq2seq.cli.translate import translate
    from seq2seq.config import TranslateConfig

    train_logging(compose_config("train", [*TINY_TRAIN, "max_steps=2", "device=cpu"]), tmp_path / "run")
    monkeypatch.setattr(cpu_sharing, "waiting", how)
    monkeypatch.setattr(cpu_sharing, "others_at_start", others)
    (tmp_path / "in.txt").write_text("a b c\n")
    cfg = TranslateConfig(run=str(tmp_path / "run"), input=str(tmp_path / "in.txt"), output=str(tmp_path / "out.txt"))
    caplog.clear()  # the training's own cpu line says "shared" when the suite started on a busy machine
    with caplog.at_level(logging.INFO):
        translate(OmegaConf.structured(cfg))
    assert ("shared with other work" in caplog.text) is logged, caplog.text


BUSY_THEN_SLEEP = (
    "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5: pass\ntime.sleep(30)"
)


def test_a_living_child_s_cpu_time_is_this_process_s_own_work() -> None:
    """Inductor's compile workers (and the C++ compiler they run) are children of the training process:
    their CPU time is its own work, not other work for SharingWatch to give a thread up for (which
    made a compiled run recompile for its new thread count). A child that has spent 0.5 s of CPU and
    still lives (so its time is in no `os.times()` field yet) counts in `own_seconds()`."""

    def beyond_this_process() -> float:  # this process's own threads (and their /proc reads) left out
        times = os.times()
        return cpu_sharing.own_seconds() - times.user - times.system

    before = beyond_this_process()
    child = subprocess.Popen([sys.executable, "-c", BUSY_THEN_SLEEP])
    try:
        deadline = time.monotonic() + 20
        while beyond_this_process() - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        grown = beyond_this_process() - before
        assert child.poll() is None  # still running: not yet in os.times()'s children
        assert grown >= 0.5, grown
    finally:
        child.kill()
        child.wait()
