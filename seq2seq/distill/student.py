"""The student: its training config, composed from the teacher's, and its training, resumed after a kill.

The student trains as its teacher was trained (the teacher's saved config: optimiser, schedule, budget,
batch size, precision, stop rules), as a smaller model: the teacher's model settings with the sizes of
the student= preset (configs/model/<name>.yaml) on top (student=teacher: none, the teacher's own), so
dropout, shared embeddings and the like stay the teacher's. recipe= is fixed (a recipe's overrides would
resize the model). train.KEY=VALUE arguments come last. Its data are the teacher's settings over parallel files in the output folder: the distilled
training pairs, and the original validation and test pairs, so that it is validated and tested
against the original references.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.resources
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from seq2seq.artifacts.replacing import write_new_json
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import (
    STUDENT_AS_TEACHER,
    DataConfig,
    ModelConfig,
    TrainConfig,
    UserError,
    typed_dotlist,
    validate_recipes,
    validate_train,
)
from seq2seq.data.parallel_corpus import reading_files
from seq2seq.distill.output import LOG_FORMAT, read_json
from seq2seq.distill.teacher import Teacher

log = logging.getLogger("seq2seq.distill")
SUMMARY = "distill-summary.json"  # written into a student's run directory once its training finished
# train.* keys the command sets itself.
NOT_OVERRIDABLE = ("data", "resume", "init_from", "overwrite", "recipe", "recipes")


def model_preset(name: str) -> dict[str, Any]:
    folder = importlib.resources.files("seq2seq.configs") / "model"
    options = sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))
    if name not in options:
        raise UserError(f"student={name}: no such model preset; choose from {', '.join(options)}")
    return OmegaConf.to_container(OmegaConf.create((folder / f"{name}.yaml").read_text(encoding="utf-8")))


# The key a training check names ("config error: max_steps=-1: ..."): under seq2seq-distill the student's
# training keys are given as train.KEY=VALUE, its corpus's as data.KEY=VALUE.
TRAIN_KEY = re.compile(r"^(config error: )(?!data\.)([A-Za-z_][\w.]*=)")


def student_config(
    teacher: Teacher, preset: str, data: DataConfig, overrides: list[str], root: Path, has_test: bool
) -> DictConfig:
    """The student's training config over the files under `root` (see with_files), checked as
    seq2seq-train checks one (`overrides`: train.KEY=VALUE without the prefix)."""
    saved = {k: v for k, v in teacher.config.items() if k in TrainConfig.__dataclass_fields__}
    cfg = OmegaConf.merge(OmegaConf.structured(TrainConfig), {k: v for k, v in saved.items() if k != "data"})
    sizes = {} if preset == STUDENT_AS_TEACHER else model_preset(preset)
    cfg.model = OmegaConf.merge(OmegaConf.structured(ModelConfig), saved.get("model", {}), sizes)
    cfg.data = OmegaConf.structured(data)
    cfg.recipe, cfg.recipes, cfg.resume, cfg.init_from, cfg.overwrite = "fixed", [], None, None, False
    for override in overrides:
        key = override.partition("=")[0].lstrip("+")
        if key.split(".")[0] in NOT_OVERRIDABLE:
            hint = f"give data.{key.removeprefix('data.')}=" if key.startswith("data.") else "seq2seq-distill sets it"
            raise UserError(f"train.{key}: cannot be set here ({hint})")
    try:
        cfg = OmegaConf.merge(cfg, typed_dotlist([o.lstrip("+") for o in overrides], TrainConfig))
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "train"
        raise UserError(f"train.{key}: {str(err).strip().splitlines()[0]}") from err
    cfg.data = reading_files(cfg.data, root, "distilled", has_test)
    if preset != STUDENT_AS_TEACHER:  # the teacher's own sizes were asked for
        warn_if_not_smaller(cfg.model, saved.get("model", {}), preset)
    try:
        validate_train(cfg)
        validate_recipes(cfg)
    except UserError as err:  # its keys as this command line spells them: train.max_steps (data.* as they are)
        raise type(err)(TRAIN_KEY.sub(r"\1train.\2", str(err), count=1)) from err
    return cfg


def warn_if_not_smaller(student: Any, teacher: dict[str, Any], preset: str) -> None:
    """A student no smaller than its teacher in any dimension decodes no faster: allowed (self-distillation
    is a use), but said, since the recipe a teacher trained with may be narrower than a preset."""
    sizes = ("d_model", "ffn_dim", "encoder_layers", "decoder_layers")
    if teacher and all(student[k] >= teacher.get(k, 0) for k in sizes):
        log.warning(
            "student=%s (%s) is no smaller than the teacher (%s): it will not decode faster; a smaller preset, or "
            "train.model.d_model=...",
            preset,
            ", ".join(f"{k}={student[k]}" for k in sizes),
            ", ".join(f"{k}={teacher.get(k)}" for k in sizes),
        )


@dataclass(frozen=True)
class StudentRun:
    """One training of the distillation: its config (student_config's, validated) and its run directory
    inside the output folder. train/plan.py's `plan_run` plans it when it starts, once the files it
    reads are written (the plan hashes them)."""

    config: DictConfig
    run_dir: Path
    what: str  # how the log names it

    def on_references(self, root: Path, has_test: bool) -> StudentRun:
        """The baseline: the same student on the original references (data/original/), stopped only by
        the update count train_once gives it (no clock, target or patience stops it sooner)."""
        config = copy.deepcopy(self.config)
        config.data = reading_files(config.data, root, "original", has_test)
        config.max_minutes, config.max_epochs, config.target, config.patience = None, None, None, None
        return StudentRun(config, self.run_dir.with_name("baseline"), "baseline (original references)")


def train_once(run: StudentRun, max_steps: int | None = None) -> dict[str, Any]:
    """Trains `run` (inside the output folder: ours) and returns its summary: a finished run's as it
    recorded it, a killed run's resumed from its last checkpoint, else a fresh run (of `max_steps`
    updates where given: the baseline's, the student's count)."""
    # torch: once the command line and config are known to be good
    from seq2seq.train.command import train
    from seq2seq.train.plan import plan_run
    from seq2seq.train.run_outputs import BeforeStart

    run_dir = run.run_dir
    if (run_dir / SUMMARY).is_file():
        log.info("%s: trained earlier (%s)", run.what, run_dir)
        return read_json(run_dir / SUMMARY)
    config = copy.deepcopy(run.config)
    if max_steps is not None:
        config.max_steps = max_steps
    if RunDir(run_dir).checkpoint("last").is_file():
        config.resume = str(run_dir)
        log.info("%s: resuming %s from its last checkpoint", run.what, run_dir)
    else:
        config.overwrite = True  # an interrupted start of our own, if anything
        log.info("%s: training into %s", run.what, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with _train_log(run_dir):
        before = BeforeStart.of(run_dir)
        summary = train(plan_run(config, run_dir, []), before)
    summary = json.loads(json.dumps(summary, default=str))
    if not summary.get("exit_status"):  # stopped by a signal: the rerun resumes it
        write_new_json(run_dir / SUMMARY, summary)
    return summary


@contextlib.contextmanager
def _train_log(run_dir: Path) -> Iterator[None]:
    """The run's train.log, as seq2seq-train's Hydra writes it: a student's run has the log of any run."""
    handler = logging.FileHandler(run_dir / "train.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("seq2seq")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
