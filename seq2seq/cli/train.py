"""`seq2seq-train`: Hydra composes the config, `seq2seq.train.run.train` does the work.

The command line and the composed config are checked before torch is imported (a config error is one
line in a fraction of a second), then the process is prepared (seq2seq/startup.py), then the run
directory is made and locked, and Hydra hands the config to `train`."""

from __future__ import annotations

from seq2seq.allocator import relaunch_with_tcmalloc

if __name__ == "__main__":  # `python -m seq2seq.cli.train` (torchrun): the console script does it in launch.py
    relaunch_with_tcmalloc("seq2seq-train", __name__)  # before torch is imported: see seq2seq/allocator.py

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from seq2seq.artifacts.run_dir import LOCK_FILE, RunDir
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
from seq2seq.startup import prepare_process
from seq2seq.train.lock import claim_run_directory, holds_run_directory, refuse_if_busy

GROUPS = TRAIN_GROUPS

register_configs()
# A resumed run keeps writing into its own directory (see hydra.run.dir in configs/train.yaml).
OmegaConf.register_new_resolver("seq2seq.run_dir", lambda resume, fresh: resume or fresh, replace=True)
OmegaConf.register_new_resolver(
    "seq2seq.hydra_subdir", lambda resume, stamp: f".hydra/resumed-{stamp}" if resume else ".hydra", replace=True
)


def main() -> None:
    if wants_help(sys.argv[1:]):
        usage = "[group=option ...] [key=value ...]"
        report_errors(lambda: print_help(sys.argv[1:], "seq2seq-train", usage, TrainConfig, GROUPS), False)
        return

    # Before Hydra: it would add a `+key` and run without reading it, or answer a typo in six lines;
    # and it creates the run directory (.hydra/, train.log) first, with a traceback when it cannot.
    def check() -> None:
        check_override_keys(sys.argv[1:], TrainConfig, GROUPS)
        check_composed_config(sys.argv[1:])
        prepare_process()  # the config is good: the work starts, and torch is imported from here on
        check_run_directory(sys.argv[1:])

    report_errors(check, "debug=true" in sys.argv)
    try:
        _hydra_main()
    finally:  # Hydra refused the command line before it wrote anything: the directory made above goes
        from seq2seq.train.run_outputs import holds_only_startup_files

        made = _created_run_directory
        if made is not None and holds_run_directory(made) and holds_only_startup_files(made, {LOCK_FILE}):
            shutil.rmtree(made, ignore_errors=True)


# The run directory this process made itself (os.mkdir succeeded here), or None: only such a directory
# may a failed start remove, and only while this process holds its lock.
_created_run_directory: Path | None = None


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    global _created_run_directory
    runtime = HydraConfig.get()
    run_dir = Path(runtime.runtime.output_dir)
    if _created_run_directory is None and _hydra_named_a_new_run_directory(sys.argv[1:]):
        _created_run_directory = run_dir.resolve()  # a new time-stamped directory that Hydra made just now

    def run() -> dict:
        # A refused config or unreadable data leaves no run directory behind (Hydra made it just now).
        try:
            if _first_rank():  # before any work; a run started in the same second into the same directory stops here
                claim_run_directory(run_dir)
            check_resolves(cfg)  # what check_composed_config could not compose (a sweep, --config-name)
            from seq2seq.train.run import train  # torch: only once the config is known to be good

            return train(cfg, run_dir, list(runtime.overrides.task))  # checks the run's config
        except UserError:
            if run_dir.resolve() == _created_run_directory and holds_run_directory(run_dir):
                _remove_startup_only_directory(run_dir)
            raise

    debug = "debug=true" in sys.argv  # cfg.debug itself may be what does not resolve
    summary = exit_on_interrupt(lambda: report_errors(run, debug or cfg.debug), debug)
    if summary.get("exit_status"):  # stopped by Ctrl-C or SIGTERM, after saving: not a finished run
        sys.exit(summary["exit_status"])


def _hydra_named_a_new_run_directory(argv: list[str]) -> bool:
    """No resume= and no hydra.run.dir= on the command line: Hydra made a new, time-stamped directory.
    Read from the command line, not the config: a key that does not resolve is reported in run()."""
    values = {o.key_or_group: o.value() for o in parse_command_line(argv)[1] if o.value_type is not None}
    return not values.get("resume") and not values.get("hydra.run.dir")


def check_composed_config(argv: list[str]) -> None:
    """The config Hydra will compose from this command line, checked as train() checks it, before the
    run directory exists and before torch is imported. Left to train(): a resumed run's config (its
    checkpoint's) and a run from init_from= (a Marian model brings model.*), and what this cannot
    compose as Hydra will (a sweep, another config file, Hydra's own flags: Hydra reports those)."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args, overrides = parse_command_line(argv)
    flags = ("cfg", "info", "multirun", "shell_completion", "config_path", "config_name", "config_dir")
    if any(getattr(args, flag, None) for flag in (*flags, "experimental_rerun")):
        return
    values = {o.key_or_group: o.value() for o in overrides if not o.is_delete() and o.value_type is not None}
    if values.get("resume") or values.get("init_from"):
        return
    keys = [a for a in args.overrides if not a.lstrip("+~").startswith(("hydra.", "hydra/", "hydra="))]
    try:
        with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
            cfg = compose("train", overrides=keys)
    except (HydraException, OmegaConfBaseException):
        return  # Hydra says what is wrong, as it would without this check
    check_resolves(cfg)
    validate_train(cfg)
    validate_recipes(cfg)


def check_run_directory(argv: list[str]) -> None:
    """resume= must name an existing run with a last.pt (Hydra would create a missing one), the
    directory the run will write to must be writable, and a new run's must hold no earlier run (or
    overwrite=true) and nothing that is not a run's. A directory named here is made and locked now,
    before Hydra writes into it, and stays locked until the process ends."""
    args, overrides = parse_command_line(argv)
    values = {o.key_or_group: o.value() for o in overrides if not o.is_delete() and o.value_type is not None}
    resume = values.get("resume")
    init_from = values.get("init_from")
    check_weights_source(resume if isinstance(resume, str) else None, init_from if isinstance(init_from, str) else None)
    from seq2seq.train.run_outputs import check_new_run_directory

    if isinstance(resume, str) and resume:
        if not Path(resume).is_dir():
            raise UserError(f"resume={resume}: no such run directory")
        run = RunDir(resume)
        if not run.checkpoint("last").is_file():
            raise UserError(f"resume={resume}: has no {run.relative(run.checkpoint('last'))} to resume from")
        _probe_writable(Path(resume), Path(resume))
        if _first_rank():
            claim_run_directory(Path(resume))  # before Hydra writes .hydra/ and train.log into it
        log = Path(resume) / "train.log"  # Hydra appends to it before any of our code runs
        if log.exists() and not os.access(log, os.W_OK):
            raise UserError(f"{log}: not writable, so the resumed run cannot log")
    elif not args.multirun:
        target = Path(str(values.get("hydra.run.dir", "outputs")))
        existing = next(p for p in [target, *target.parents] if p.exists() or p == Path(p.anchor))
        _probe_writable(target, existing)
        if not _first_rank() or "${" in str(target):  # rank 0 claims it; Hydra resolves an interpolation
            return
        if existing == target:  # before Hydra writes its .hydra/config.yaml over the earlier run's
            refuse_if_busy(target)  # a run in progress, overwrite=true or not
            check_new_run_directory(target, values.get("overwrite") is True)
        else:
            _make_run_directory(target)
        claim_run_directory(target)  # two runs started at once into one directory: one stops here


def _make_run_directory(target: Path) -> None:
    """Creates the new run directory; whether this process made it decides whether a failed start
    may remove it (another process may make it at the same moment)."""
    global _created_run_directory
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir()
    except FileExistsError:
        return
    except OSError as err:
        raise UserError(f"{target}: the run directory is not writable ({err.strerror or err})") from err
    _created_run_directory = target.resolve()


def _first_rank() -> bool:
    """Under torchrun only rank 0 takes the lock (in train()); the others checking it at the same
    moment as rank 0 would collide with it."""
    return os.environ.get("RANK", "0") == "0"


def _probe_writable(run_dir: Path, existing: Path) -> None:
    if not existing.is_dir():
        raise UserError(f"{run_dir}: the run directory is not writable ({existing} is not a directory)")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise UserError(f"{run_dir}: the run directory is not writable ({err.strerror or err})") from err


def _remove_startup_only_directory(run_dir: Path) -> None:
    """Removes the run directory this process made when it holds nothing but what this run wrote at
    start-up (Hydra's config and log, the lock, the marker)."""
    from seq2seq.train.run_outputs import holds_only_startup_files

    if holds_only_startup_files(run_dir):
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(handler)  # train.log goes with the directory
            handler.close()
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
