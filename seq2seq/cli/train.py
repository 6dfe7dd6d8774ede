"""`seq2seq-train`: Hydra composes the config, `train` builds the run's plan of it (seq2seq/train/plan.py),
and `seq2seq.train.command.train` does the work on the plan.

The command line, the composed config and the paths it names are checked before torch is imported
(a config error is one line, without torch's seconds), then the process is prepared (seq2seq/startup.py), then the run
directory is made and locked, and Hydra hands the config to `train`. Tests and scripts call `train(cfg,
run_dir)` too: it does what the command does once Hydra has composed the config."""

from __future__ import annotations

from seq2seq.allocator import relaunch_with_tcmalloc

if __name__ == "__main__":  # `python -m seq2seq.cli.train` (torchrun): the console script does it in launch.py
    relaunch_with_tcmalloc("seq2seq-train", __name__)  # before torch is imported: see seq2seq/allocator.py

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from seq2seq.artifacts.run_dir import RunDir
from seq2seq.cli.common import (
    CONFIG_PATH,
    check_override_keys,
    check_resolves,
    exit_on_interrupt,
    parse_command_line,
    print_help,
    report_errors,
    wants_help,
)
from seq2seq.config import (
    TRAIN_GROUPS,
    TrainConfig,
    UserError,
    check_weights_source,
    register_configs,
    validate_recipes,
    validate_train,
)
from seq2seq.data.corpus import check_corpus_exists
from seq2seq.startup import prepare_process
from seq2seq.train.lock import claim_run_directory, holds_run_directory, refuse_if_busy

if TYPE_CHECKING:  # the module imports torch: seq2seq-train checks its config before torch loads
    from seq2seq.train.run_outputs import BeforeStart

GROUPS = TRAIN_GROUPS

register_configs()
# A resumed run keeps writing into its own directory (see hydra.run.dir in configs/train.yaml).
OmegaConf.register_new_resolver("seq2seq.run_dir", lambda resume, fresh: resume or fresh, replace=True)
OmegaConf.register_new_resolver(
    "seq2seq.hydra_subdir", lambda resume, stamp: f".hydra/resumed-{stamp}" if resume else ".hydra", replace=True
)


def main() -> None:
    global _started
    _started = time.monotonic()  # max_minutes counts from here (the run's clock, Trainer.clock, is this one)
    if wants_help(sys.argv[1:]):
        usage = "[group=option ...] [key=value ...]"
        report_errors(lambda: print_help(sys.argv[1:], "seq2seq-train", usage, TrainConfig, GROUPS), False)
        return

    # Before Hydra: it would add a `+key` and run without reading it, or answer a typo in six lines;
    # and it creates the run directory (.hydra/, train.log) first, with a traceback when it cannot.
    def check() -> None:
        global _config_checked
        check_override_keys(sys.argv[1:], TrainConfig, GROUPS)
        _config_checked = check_composed_config(sys.argv[1:])
        check_resume_source(sys.argv[1:])
        prepare_process()  # the config is good: the work starts, and torch is imported from here on
        check_run_directory(sys.argv[1:])

    report_errors(check, "debug=true" in sys.argv)
    try:
        _hydra_main()
    finally:  # Hydra refused the command line before our task ran: what the start made goes
        if _before_start is not None and not _task_ran and holds_run_directory(_before_start.run_dir):
            _before_start.take_back()


# The run directory as it stood before this process's start wrote into it (see check_run_directory),
# or None: a failed start takes back what is new since, while this process holds the directory's lock.
_before_start: BeforeStart | None = None
_task_ran = False  # Hydra called _hydra_main: from there a failed start is train()'s to take back
_config_checked = False  # check_composed_config checked the config Hydra composes: train() need not
_started: float | None = None  # when the command started, on time.monotonic


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    global _task_ran
    _task_ran = True
    runtime = HydraConfig.get()
    run_dir = Path(runtime.runtime.output_dir)
    before = _before_start.named(run_dir) if _before_start is not None else None

    def run() -> dict:
        if _first_rank():  # before any work; a run started in the same second into the same directory stops here
            claim_run_directory(run_dir)
        with before.taken_back_on_failure(holds=True) if before is not None else contextlib.nullcontext():
            check_resolves(cfg)  # what check_composed_config could not compose (a sweep, --config-name)
        overrides = list(runtime.overrides.task)
        return train(cfg, run_dir, overrides, before=before, checked=_config_checked, started=_started)

    debug = "debug=true" in sys.argv  # cfg.debug itself may be what does not resolve
    summary = exit_on_interrupt(lambda: report_errors(run, debug or cfg.debug), debug)
    if summary.get("exit_status"):  # stopped by Ctrl-C or SIGTERM, after saving: not a finished run
        sys.exit(summary["exit_status"])


def train(
    cfg: DictConfig,
    run_dir: Path | str,
    overrides: list[str] | None = None,
    before: BeforeStart | None = None,
    checked: bool = False,
    started: float | None = None,
) -> dict[str, Any]:
    """Trains as `cfg` says and returns the final summary (best metric, step, checkpoint path): the
    run's plan (seq2seq.train.plan: its config, a resumed run's own or a Marian model's architecture;
    the run directory's check; the corpus), then `seq2seq.train.command.train` on it. A start that
    fails takes back what it added to the run directory: `before` is the directory as it stood before
    the start (seq2seq-train notes it before Hydra writes there). `checked`: the caller validated `cfg`
    (seq2seq-train does, before torch loads), so it is not again. `started`: when the command started,
    on `Trainer.clock` (default: now): max_minutes counts from there. The caller's config is left as it
    was given."""
    # torch: only once the config is known to be good
    from seq2seq.train.command import train as run
    from seq2seq.train.plan import plan_run
    from seq2seq.train.run_outputs import BeforeStart

    run_dir, overrides = Path(run_dir), overrides or []
    before = before or BeforeStart.of(run_dir)
    # A directory this process claimed is seq2seq-train's: checked before Hydra wrote into it (or new,
    # made by Hydra just now), and writable (the lock is written there). From code, train() checks it.
    claimed = holds_run_directory(run_dir)
    with before.taken_back_on_failure(claimed):
        plan = plan_run(cfg, run_dir, overrides, checked, claimed)
    return run(plan, before, started)


def check_composed_config(argv: list[str]) -> bool:
    """The config Hydra will compose from this command line, checked as train() checks it, before the
    run directory exists and before torch is imported; whether it was (then train() does not check it
    again). Left to train(): a resumed run's config (its checkpoint's) and a run from init_from= (a
    Marian model brings model.*), and what this cannot compose as Hydra will (a sweep, another config
    file, Hydra's own flags: Hydra reports those)."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args, overrides = parse_command_line(argv)
    flags = ("cfg", "info", "multirun", "shell_completion", "config_path", "config_name", "config_dir")
    if any(getattr(args, flag, None) for flag in (*flags, "experimental_rerun")):
        return False
    values = {o.key_or_group: o.value() for o in overrides if not o.is_delete() and o.value_type is not None}
    if values.get("resume") or values.get("init_from"):
        return False
    keys = [a for a in args.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/", "hydra="))]
    try:
        with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
            cfg = compose("train", overrides=keys)
    except (HydraException, OmegaConfBaseException):
        return False  # Hydra says what is wrong, as it would without this check
    check_resolves(cfg)
    validate_train(cfg)
    validate_recipes(cfg)
    check_corpus_exists(cfg.data)
    return True


def check_resume_source(argv: list[str]) -> None:
    """resume= names an existing run with a last.pt (Hydra would create a missing one): checked
    before torch loads, so that a path typed wrong is answered at once."""
    _, overrides = parse_command_line(argv)
    values = {o.key_or_group: o.value() for o in overrides if not o.is_delete() and o.value_type is not None}
    resume = values.get("resume")
    if isinstance(resume, str) and resume:
        if not Path(resume).is_dir():
            raise UserError(f"resume={resume}: no such run directory")
        run = RunDir(resume)
        if not run.checkpoint("last").is_file():
            raise UserError(f"resume={resume}: has no {run.relative(run.checkpoint('last'))} to resume from")


def check_run_directory(argv: list[str]) -> None:
    """resume= must name an existing run with a last.pt (Hydra would create a missing one), the
    directory the run will write to must be writable, and a new run's must hold no earlier run (or
    overwrite=true) and nothing that is not a run's. A directory named here is made and locked now,
    before Hydra writes into it, and stays locked until the process ends; what it held is noted
    first, so that a failed start takes back only what it added."""
    global _before_start
    args, overrides = parse_command_line(argv)
    values = {o.key_or_group: o.value() for o in overrides if not o.is_delete() and o.value_type is not None}
    resume = values.get("resume")
    init_from = values.get("init_from")
    check_weights_source(resume if isinstance(resume, str) else None, init_from if isinstance(init_from, str) else None)
    from seq2seq.train.run_outputs import BeforeStart, check_new_run_directory, check_writable

    if isinstance(resume, str) and resume:  # a run with a last.pt: check_resume_source
        check_writable(Path(resume))
        if _first_rank():
            _before_start = BeforeStart.of(Path(resume))
            claim_run_directory(Path(resume))  # before Hydra writes .hydra/ and train.log into it
        log = Path(resume) / "train.log"  # Hydra appends to it before any of our code runs
        if log.exists() and not os.access(log, os.W_OK):
            raise UserError(f"{log}: not writable, so the resumed run cannot log")
    elif not args.multirun:
        named = values.get("hydra.run.dir")
        target = Path(str(named or "outputs"))  # without it Hydra makes outputs/<date>/<time>
        check_writable(target)
        if not _first_rank() or "${" in str(target):  # rank 0 claims it; Hydra resolves an interpolation
            return
        _before_start = BeforeStart.of(target)
        if named is None:
            return  # the time-stamped directory is claimed as Hydra hands it over
        if target.is_dir():  # before Hydra writes its .hydra/config.yaml over the earlier run's
            refuse_if_busy(target)  # a run in progress, overwrite=true or not
            check_new_run_directory(target, values.get("overwrite") is True)
        else:
            _make_run_directory(target)
        claim_run_directory(target)  # two runs started at once into one directory: one stops here


def _make_run_directory(target: Path) -> None:
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{target}: the run directory is not writable ({err.strerror or err})") from err


def _first_rank() -> bool:
    """Under torchrun only rank 0 takes the lock (in train()); the others checking it at the same
    moment as rank 0 would collide with it."""
    return os.environ.get("RANK", "0") == "0"


if __name__ == "__main__":
    main()
