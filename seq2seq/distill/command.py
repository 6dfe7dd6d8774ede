"""`distill(plan)`: seq2seq-distill's work, step by step, each step's result kept in the output folder so
that a rerun of the same command after a kill goes on from where it stopped. cli/distill.py builds the
plan (distill/plan.py) of the command line; nothing here reads the command's config.

    <output>/.seq2seq-distill      the marker: this command made the folder
    <output>/settings.json         what decides the contents (a rerun must give the same)
    <output>/distill.log           everything logged, every run appended
    <output>/data/distilled/       train.<src>-<tgt>.<lang>: the sources and the teacher's kept targets
                                   (or the references, trained_targets=references), and the
                                   back-translated pairs of back_translate= (back_translation.py)
    <output>/data/original/        valid.* and test.* (and train.* with baseline=true): the references
                                   (a back-translated direction's valid.*: made as its train.* is)
    <output>/data/selection.json   per direction: lines, kept, dropped and why, the translations' cache
    <output>/student/, baseline/   run directories (seq2seq-translate run=<output>/student)
    <output>/state.json            each step's seconds, summed over the runs that did it
    <output>/result.json           teacher against student (report.py)

Each step is one module's: the folder itself (its marker, lock, log, settings, state and result)
output.py's, the distilled corpus corpus.py's, the student's training student.py's, result.json's
comparison report.py's.

The teacher's translations themselves live in the cache (translations.py), by teacher + corpus +
settings: another student of the same teacher and corpus reuses them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from seq2seq.config import UserError
from seq2seq.distill import report
from seq2seq.distill.corpus import distilled_corpus, original_training_pairs
from seq2seq.distill.output import RESULT, opened
from seq2seq.distill.plan import DistillPlan
from seq2seq.distill.student import train_once

log = logging.getLogger("seq2seq.distill")


def distill(plan: DistillPlan) -> dict[str, Any]:
    """The whole command. Returns result.json's contents, or {"exit_status": N} when a signal stopped
    the student's training (rerun to resume). A write into the output folder that fails (a full or
    read-only disk) is one line naming output=: each step's files are replaced whole, so what was kept
    is whole, and a rerun goes on from it."""
    try:
        return _distill(plan)
    except OSError as err:
        if err.filename is not None and not Path(os.path.abspath(err.filename)).is_relative_to(plan.output):
            raise  # not the output folder's
        raise UserError(
            f"output={plan.output}: cannot write there ({err.strerror or err}); "
            "free some space and rerun the same command: it goes on from the last step kept"
        ) from err


def _distill(plan: DistillPlan) -> dict[str, Any]:
    with opened(plan.output, plan.settings) as folder:
        done = folder.finished()
        if done is not None and (plan.baseline is None or "baseline" in done):  # baseline=true may come later
            log.info("finished earlier: %s", folder.path / RESULT)
            return done
        with folder.step("teacher_and_selection"):
            selection = distilled_corpus(plan, folder.path / "data")
        with folder.step("student"):
            summary = train_once(plan.student)
        if summary.get("exit_status"):
            return summary
        baseline = None
        if plan.baseline is not None:
            with folder.step("baseline"):
                original_training_pairs(plan, folder.path / "data")
                baseline = train_once(plan.baseline, max_steps=summary["step"])
            if baseline.get("exit_status"):
                return baseline
        with folder.step("report"):
            result = report.compare(plan, selection, summary, baseline)
        return folder.finish(result)
