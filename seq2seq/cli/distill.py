"""`seq2seq-distill`: sequence-level knowledge distillation in one command (docs/distill.md).

    seq2seq-distill teacher=<run> output=<new folder> [student=small] [nbest=4 select=chrf min_score=20]
                    [data.KEY=VALUE ...: the corpus, over the teacher's data settings]
                    [train.KEY=VALUE ...: the student's training, over the teacher's]

The work is seq2seq/distill/command.py's. The command line is checked before torch is imported; a bad
key, value, teacher or corpus is one line on stderr, exit status 2, and nothing is written. Rerun the
same command after a kill or Ctrl-C: it goes on where it stopped. Prints result.json on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seq2seq.cli.common import exit_on_interrupt, parse_key_values, print_key_help, report_errors, wants_help
from seq2seq.config import DistillConfig, UserError, validate_distill

if TYPE_CHECKING:
    from seq2seq.distill.plan import DistillPlan

USAGE = (
    "teacher=<run> output=<new folder> [student=small] [key=value ...] "
    "[data.KEY=VALUE ... (the corpus)] [train.KEY=VALUE ... (the student's training)]"
)
PASSED_ON = ("data.", "train.")  # arguments for the corpus and the student's config, checked by seq2seq.distill


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print_key_help("seq2seq-distill", USAGE, DistillConfig)
        return
    debug = "debug=true" in argv

    def run() -> dict:
        for argument in argv:
            if argument.startswith(PASSED_ON) and "=" not in argument:
                raise UserError(f"{argument}: expected key=value; --help lists the keys")
        cfg = parse_key_values([a for a in argv if not a.startswith(PASSED_ON)], DistillConfig)
        validate_distill(cfg)
        for path in str(cfg.teacher or "").split(","):  # a path typed wrong is answered before torch loads
            if path and not Path(path).exists():
                raise UserError(f"teacher={cfg.teacher}: {path}: no such file or directory; give a run directory")
        from seq2seq.startup import prepare_process

        prepare_process()  # the command line is good: the work starts, and torch is imported from here on
        from seq2seq.distill.command import distill

        data = [a for a in argv if a.startswith("data.")]
        train = [a.removeprefix("train.") for a in argv if a.startswith("train.")]
        return distill(distill_plan(cfg, data, train))

    result = exit_on_interrupt(lambda: report_errors(run, debug), debug)
    if result.get("exit_status"):  # the student's training stopped by a signal, after saving: rerun to resume
        sys.exit(result["exit_status"])
    json.dump(result, sys.stdout, indent=2)
    print()


def distill_plan(cfg: DistillConfig | Any, data: list[str], train: list[str]) -> DistillPlan:
    """The plan of a checked config (`data`: its data.KEY=VALUE arguments, `train` its train.KEY=VALUE
    ones without "train."): the teacher, its decoding job, the corpus, the student's training, each read
    and checked once, before anything is written (a corpus that cannot be read, a cache= that cannot be
    one: one line). Imports torch: after prepare_process."""
    from seq2seq.config import DISTILL_SEARCH_KEYS, as_dict
    from seq2seq.data.directions import each_direction
    from seq2seq.data.parallel_corpus import corpus_test_pairs, held_out
    from seq2seq.distill.back_translation import plan as back_translation_plan
    from seq2seq.distill.back_translation import with_back_translated
    from seq2seq.distill.plan import DistillPlan, ReportPlan, Targets
    from seq2seq.distill.report import model_path
    from seq2seq.distill.source_language import check_source_language
    from seq2seq.distill.student import StudentRun, student_config
    from seq2seq.distill.teacher import corpus_config, read_teacher
    from seq2seq.distill.translations import TeacherCache, cache_folder, weight_digests
    from seq2seq.inference.job import decoding_job
    from seq2seq.inference.translator_api import decoding_config

    teacher = read_teacher(cfg.teacher)
    corpus = corpus_config(teacher, data)
    output = Path(cfg.output).resolve()
    back_translated = back_translation_plan(list(cfg.back_translate), [d for d, _ in each_direction(corpus)])
    held_out_pairs = held_out(corpus)  # read once: a corpus that cannot be read is one line, nothing written
    if "test" in held_out_pairs:  # a back-translated direction is tested on the corpus's own pairs, where it has them
        held_out_pairs["test"].update(corpus_test_pairs(corpus, [item.direction for item in back_translated]))
    if cfg.check_language:
        check_source_language(corpus)
    has_test = "test" in held_out_pairs
    student_data = with_back_translated(corpus, back_translated)
    config = student_config(teacher, cfg.student, student_data, train, output / "data", has_test)
    student = StudentRun(config, output / "student", "student")
    cache = cache_folder(cfg.cache)  # a cache= that cannot be one: refused before anything is written
    # The teacher decodes as seq2seq-translate decodes it with these settings (the default engine).
    search = {key: getattr(cfg, key) for key in DISTILL_SEARCH_KEYS}
    teacher_job = decoding_job(decoding_config(model_path(teacher.paths), **search, threads=cfg.threads))
    decoding = teacher_job.settings  # what keys its translations in the cache, beside the sources and weights
    keyed = {"beam": decoding.beam, "nbest": decoding.nbest, "length_penalty": decoding.length_penalty}
    chosen = ("student", "beam", "nbest", "select", "min_score", "length_penalty", "trained_targets")
    digests = weight_digests(teacher.weights)  # hashed once: the folder's settings and every cache key read them
    settings = {  # what decides the output folder's contents (output.check_settings)
        "teacher": teacher.paths,
        # By content: a teacher's files replaced (best.pt by another checkpoint) are another teacher.
        "teacher_weights": [{"file": str(path.resolve()), "sha256": digests[str(path)]} for path in teacher.weights],
        **{key: getattr(cfg, key) for key in chosen},
        "back_translate": list(cfg.back_translate),
        "data": list(data),
        "train": list(train),
    }
    return DistillPlan(
        output=output,
        teacher=teacher,
        teacher_job=teacher_job,
        corpus=corpus,
        back_translated=tuple(back_translated),
        held_out=held_out_pairs,
        translations=TeacherCache(cache, digests, keyed, cfg.chunk_lines),
        targets=Targets(cfg.trained_targets, cfg.select, cfg.min_score),
        student=student,
        baseline=student.on_references(output / "data", has_test) if cfg.baseline else None,
        report=ReportPlan(cfg.speed_lines, tuple(cfg.speed_threads), {**as_dict(cfg), "teacher": teacher.paths}),
        settings=settings,
    )


if __name__ == "__main__":
    main()
