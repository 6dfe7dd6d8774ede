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
    <output>/result.json           teacher against student (report.py)

The teacher's translations themselves live in the cache (translations.py), by teacher + corpus +
settings: another student of the same teacher and corpus reuses them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from seq2seq import cpu_sharing
from seq2seq.artifacts.replacing import write_new_json
from seq2seq.config import DataConfig, UserError
from seq2seq.data.directions import Direction, direction_config, each_direction
from seq2seq.data.parallel_corpus import pair_files, split_pairs
from seq2seq.distill import report
from seq2seq.distill.back_translation import BackTranslated
from seq2seq.distill.files import held, read_json, write_lines
from seq2seq.distill.output import check_settings, claim_output
from seq2seq.distill.plan import DistillPlan
from seq2seq.distill.selection import select
from seq2seq.distill.student import LOG_FORMAT, train_once
from seq2seq.distill.translations import cache_key, cut_to_count, read_translations, translate_cached
from seq2seq.inference.loading import api_engine
from seq2seq.inference.translator_api import TranslatorAPI

log = logging.getLogger("seq2seq.distill")
SELECTION, RESULT, STATE = "selection.json", "result.json", "state.json"


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
    output = plan.output
    resumed = claim_output(output)
    with held(output, "a distillation"), _logging(output / "distill.log"):
        check_settings(output, plan.settings)
        log.info("%s %s", "resuming" if resumed else "distilling into", output)
        state = read_json(output / STATE) if (output / STATE).is_file() else {"seconds": {}}
        done = read_json(output / RESULT) if (output / RESULT).is_file() else None
        if done is not None and (plan.baseline is None or "baseline" in done):  # baseline=true may come later
            log.info("finished earlier: %s", output / RESULT)
            return done
        with _timed(state, "teacher_and_selection", output):
            selection = distilled_corpus(plan, output / "data")
        with _timed(state, "student", output):
            summary = train_once(plan.student)
        if summary.get("exit_status"):
            return summary
        baseline = None
        if plan.baseline is not None:
            with _timed(state, "baseline", output):
                original_training_pairs(plan.corpus, output / "data", plan.back_translated)
                baseline = train_once(plan.baseline, max_steps=summary["step"])
            if baseline.get("exit_status"):
                return baseline
        with _timed(state, "report", output):
            result = compare(plan, selection, summary, baseline)
        result["seconds"] = state["seconds"]
        write_new_json(output / RESULT, result)
        log.info("teacher against student: %s", output / RESULT)
        return result


def distilled_corpus(plan: DistillPlan, root: Path) -> dict[str, Any]:
    """Step 1 and 2 for every direction, the back-translated directions, and the original held-out pairs
    beside them: the files the student reads. Done once: selection.json says it is."""
    if (root / SELECTION).is_file():
        log.info("distilled corpus made earlier: %s", root / "distilled")
        return read_json(root / SELECTION)
    for folder in ("distilled", "original"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    engine = api_engine(plan.teacher_job)  # the teacher as seq2seq-translate decodes it with these settings
    selection = {}
    for direction, one in each_direction(plan.corpus):
        if plan.targets.trained_targets == "references":
            selection[direction.name] = references_direction(direction, one, root / "distilled")
        else:
            selection[direction.name] = distil_direction(plan, engine, direction, one, root / "distilled")
    for item in plan.back_translated:
        entry = back_translate_direction(plan, engine, item, root)
        made_for = [name for name, earlier in selection.items() if earlier.get("translations") == entry["translations"]]
        if made_for:  # a distilled direction's translations, reused: their time is counted there, once
            entry.update(teacher_seconds=None, teacher_lines_per_second=None, translations_of=made_for[0])
        selection[item.direction.name] = entry
    for split, by_direction in plan.held_out.items():
        for name, (sources, references) in by_direction.items():
            write_pairs(root / "original", split, Direction(*name.split("-")), sources, references)
    write_new_json(root / SELECTION, selection)
    return selection


def distil_direction(
    plan: DistillPlan, engine: TranslatorAPI, direction: Direction, one: DataConfig, folder: Path
) -> dict[str, Any]:
    """One direction's training pairs, translated by the teacher, a target chosen per line and bad lines
    dropped, written as train.<src>-<tgt>.<lang> in `folder`; returns its entry of selection.json."""
    sources, references = split_pairs(one, "train")
    nbests, progress, cached = teacher_translations(plan, engine, direction.name, sources)
    targets = plan.targets
    kept = select(sources, nbests, references, targets.select, targets.min_score)
    write_pairs(folder, "train", direction, kept.sources, kept.targets)
    log.info(
        "%s: %d of %d lines kept (%d empty, %d below min_score=%g)",
        *(direction.name, len(kept.sources), len(sources), kept.dropped_empty, kept.dropped_low_score),
        targets.min_score,
    )
    return {
        "lines": len(sources),
        "kept": len(kept.sources),
        "dropped_empty": kept.dropped_empty,
        "dropped_low_score": kept.dropped_low_score,
        **translation_figures(progress, cached),
    }


def write_pairs(folder: Path, split: str, direction: Direction, sources: list[str], targets: list[str]) -> None:
    """One direction's split as the student reads it (data/parallel_corpus.py), each file replaced whole."""
    for path, lines in zip(pair_files(folder, split, direction), (sources, targets), strict=True):
        write_lines(path, lines)


def translation_figures(progress: Any, cached: Path) -> dict[str, Any]:
    """A selection.json entry's account of the teacher's translations it was made from."""
    return {
        # To the millisecond: one decimal wrote a small corpus's measured time as 0.0.
        "teacher_seconds": round(progress.seconds, 3),
        "teacher_lines_per_second": round(progress.lines / progress.seconds, 1) if progress.seconds else None,
        "translations": str(cached),
    }


def references_direction(direction: Direction, one: DataConfig, folder: Path) -> dict[str, Any]:
    """One direction's training pairs as the corpus has them: trained_targets=references, and the
    baseline's data/original/."""
    sources, references = split_pairs(one, "train")
    write_pairs(folder, "train", direction, sources, references)
    log.info("%s: %d pairs with their references, in %s", direction.name, len(sources), folder)
    return {"lines": len(sources), "kept": len(sources), "targets": "references"}


def back_translate_direction(
    plan: DistillPlan, engine: TranslatorAPI, item: BackTranslated, root: Path
) -> dict[str, Any]:
    """One back_translate= direction x-y: the training and validation pairs of p-y with their p side
    translated into x by the teacher (back_translation.py); a line translated to nothing is dropped.
    Returns its entry of selection.json."""
    one = direction_config(plan.corpus, item.pairs_from)
    entry: dict[str, Any] = {"pivot": item.pivot, "pairs_from": item.pairs_from.name}
    for split, folder in (("train", "distilled"), ("valid", "original")):
        sources, references = split_pairs(one, split)
        nbests, progress, cached = teacher_translations(plan, engine, item.translated_by.name, sources)
        kept = [(best[0], reference) for best, reference in zip(nbests, references, strict=True) if best[0].strip()]
        write_pairs(root / folder, split, item.direction, [s for s, _ in kept], [t for _, t in kept])
        log.info(
            "%s (%s): %d of %d %s pairs of %s, their %s side translated into %s (%d empty dropped)",
            *(item.direction.name, split, len(kept), len(sources), split, item.pairs_from.name, item.pivot),
            item.direction.src,
            len(sources) - len(kept),
        )
        if split == "train":
            entry.update(lines=len(sources), kept=len(kept), dropped_empty=len(sources) - len(kept))
            entry.update(translation_figures(progress, cached))
    return entry


def original_training_pairs(corpus: DataConfig, root: Path, planned: Sequence[BackTranslated] = ()) -> None:
    """data/original/train.*: the references the baseline trains on (baseline=true may come on a rerun),
    and the back-translated directions' pairs as the student has them (they have no references)."""
    for direction, one in each_direction(corpus):
        references_direction(direction, one, root / "original")
    for item in planned:
        for lang in (item.direction.src, item.direction.tgt):
            name = f"train.{item.direction.name}.{lang}"
            write_lines(root / "original" / name, (root / "distilled" / name).read_text(encoding="utf-8").splitlines())


def teacher_translations(
    plan: DistillPlan, engine: TranslatorAPI, direction: str, sources: list[str]
) -> tuple[list[list[str]], Any, Path]:
    """The teacher's n-best lists of one direction's sources, from the cache or translated into it."""
    search = plan.teacher_job.settings
    decoding = {
        "beam": search.beam,
        "nbest": search.nbest,
        "length_penalty": search.length_penalty,
        "engine": engine.kind,
        "direction": direction,
    }
    key, parts = cache_key(plan.teacher.weights, sources, decoding)
    folder = plan.cache / key
    try:  # a full disk, a read-only one: one line naming cache= (write_new_json leaves no part of a file)
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "key.json").is_file():
            write_new_json(folder / "key.json", parts)
        progress = translate_cached(engine.with_languages(*direction.split("-")), sources, folder, plan.chunk_lines)
    except OSError as err:
        cut_to_count(folder)
        raise UserError(
            f"cache={plan.cache}: cannot keep the teacher's translations there ({err.strerror or err}); "
            "free some space or give cache= another directory (a rerun resumes what was kept)"
        ) from err
    return read_translations(folder, len(sources)), progress, folder


def compare(
    plan: DistillPlan, selection: dict[str, Any], summary: dict[str, Any], baseline: dict[str, Any] | None
) -> dict[str, Any]:
    """result.json: teacher and student side by side (and the baseline's scores, with baseline=true)."""
    split = "test" if "test" in plan.held_out else "valid"
    pairs = plan.held_out[split]
    threads, lines, student = list(plan.report.speed_threads), plan.report.speed_lines, plan.student.run_dir
    load_before = round(os.getloadavg()[0], 2)
    # Other processes' threads now, before the timings: the load average cannot tell other work from this
    # command's own training winding down and its own timing threads (publish_distill.py reads this).
    others = cpu_sharing.others_running()
    result: dict[str, Any] = {
        "name": f"distill_{'_'.join(pairs)}",
        "experiment": "distill",
        "direction": ",".join(pairs),
        "split": split,
        "settings": plan.report.settings,
        "corpus": selection,
        "teacher": report.model_report(plan.teacher.paths, pairs, lines, threads),
        "student": {
            **report.model_report([str(student)], pairs, lines, threads),
            "run": str(student),
            "steps": summary["step"],
            "train_minutes": round(summary["minutes"], 2),
        },
    }
    if baseline is not None and plan.baseline is not None:
        trained = plan.baseline.run_dir
        engine_scores = report.test_scores([str(trained)], pairs, 2 if 2 in threads else max(threads))
        result["baseline"] = {**engine_scores, "run": str(trained), "steps": baseline["step"]}
    teacher_speed, student_speed = result["teacher"]["lines_per_second"], result["student"]["lines_per_second"]
    result["speedup"] = round(student_speed / teacher_speed, 2) if teacher_speed and student_speed else None
    result["bleu_lowercase_gap"] = round(result["teacher"]["bleu_lowercase"] - result["student"]["bleu_lowercase"], 2)
    result["speed_lines"] = min(lines, len(next(iter(pairs.values()))[0]))
    result["load_average_during_speed"] = [load_before, round(os.getloadavg()[0], 2)]
    result["other_threads_before_speed"] = None if others is None else round(others, 1)
    result["machine"] = report.machine()
    result["name"] += f".{result['machine']['cpu_capability'].lower().replace(' ', '_')}"
    return result


@contextlib.contextmanager
def _timed(state: dict[str, Any], step: str, output: Path) -> Iterator[None]:
    """Adds the step's wall-clock seconds in this run to state.json (a resumed step's add up)."""
    began = time.monotonic()
    try:
        yield
    finally:
        seconds = state["seconds"]
        seconds[step] = round(seconds.get(step, 0.0) + time.monotonic() - began, 1)
        write_new_json(output / STATE, state)


@contextlib.contextmanager
def _logging(path: Path) -> Iterator[None]:
    """Every seq2seq logger's INFO and above into `path` and onto stderr for the command's life."""
    logger = logging.getLogger("seq2seq")
    handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8"), logging.StreamHandler(sys.stderr)]
    level = logger.level
    logger.setLevel(logging.INFO)
    for handler in handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logger.addHandler(handler)
    try:
        yield
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
        logger.setLevel(level)
