"""seq2seq-distill's plan: what cli/distill.py builds of the command line once, before anything is
written, and the only thing the steps (command.py) are handed.

    DistillPlan
      .output                the output folder (checked as a folder)
      .teacher, .teacher_job the teacher's files and config (teacher.py), and the decoding job it
                             translates with: inference/job.py's `decoding_job`, as seq2seq-translate's
      .corpus, .back_translated, .held_out
                             the teacher's data settings with data.* on top, the back_translate= pivots,
                             the original validation and test pairs (read once: a corpus that cannot be
                             read is one line before anything is written)
      .translations          the teacher's translations' cache (checked as a folder) and what keys them
      .targets               how a target is chosen per line (trained_targets=, select=, min_score=)
      .student, .baseline    the student's training (StudentRun: its config, validated; train/plan.py
                             plans its run once the files it reads are written), and with baseline=true
                             the same student on the original references
      .report                what result.json measures and records
      .settings              settings.json: what decides the folder's contents (output.check_settings)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config import DataConfig
from seq2seq.data.parallel_corpus import HeldOut
from seq2seq.distill.back_translation import BackTranslated
from seq2seq.distill.student import StudentRun
from seq2seq.distill.teacher import Teacher
from seq2seq.distill.translations import TeacherCache
from seq2seq.inference.job import DecodingJob


@dataclass(frozen=True)
class Targets:
    """What the student is trained to write for each source line."""

    trained_targets: str  # teacher | references
    select: str  # none | chrf | bleu: the n-best hypothesis kept (selection.py)
    min_score: float  # below it a line is dropped


@dataclass(frozen=True)
class ReportPlan:
    """result.json: the speed measurements, and the command's settings as it records them."""

    speed_lines: int
    speed_threads: tuple[int, ...]
    settings: dict[str, Any]


@dataclass(frozen=True)
class DistillPlan:
    output: Path
    teacher: Teacher
    teacher_job: DecodingJob
    corpus: DataConfig
    back_translated: tuple[BackTranslated, ...]
    held_out: HeldOut
    translations: TeacherCache
    targets: Targets
    student: StudentRun
    baseline: StudentRun | None
    report: ReportPlan
    settings: dict[str, Any]
