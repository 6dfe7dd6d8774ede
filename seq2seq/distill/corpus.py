"""The distilled corpus, step 1 and 2 of seq2seq-distill: each direction's training sources translated
by the teacher (translations.py), a target kept per line and bad lines dropped (selection.py), the
back_translate= directions' pairs made through their pivot (back_translation.py), and the original
held-out pairs beside them; written under <output>/data/ as the student reads them:

    distilled/       train.<src>-<tgt>.<lang>: the sources and the kept targets (or the references,
                     trained_targets=references), and the back-translated pairs
    original/        valid.* and test.* (and train.* with baseline=true): the references (a
                     back-translated direction's valid.*: made as its train.* is)
    selection.json   per direction: lines, kept, dropped and why, the translations' cache

data/parallel_corpus.py reads the corpus and writes the files, into a new folder from which
artifacts/replacing.py's write_files_into moves each into place (replaced whole).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from seq2seq.artifacts.replacing import write_files_into, write_new_json
from seq2seq.data.directions import direction_settings
from seq2seq.data.parallel_corpus import read_pairs, split_pairs, training_pairs, write_pairs
from seq2seq.distill.back_translation import BackTranslated
from seq2seq.distill.output import read_json
from seq2seq.distill.plan import DistillPlan
from seq2seq.distill.selection import select
from seq2seq.distill.translations import Progress, teacher_translations
from seq2seq.inference.loading import api_engine
from seq2seq.inference.translator_api import TranslatorAPI

log = logging.getLogger("seq2seq.distill")
SELECTION = "selection.json"
Pairs = dict[str, tuple[list[str], list[str]]]  # {"de-en": (sources, targets)}


def distilled_corpus(plan: DistillPlan, root: Path) -> dict[str, Any]:
    """Step 1 and 2 for every direction, the back-translated directions, and the original held-out pairs
    beside them: the files the student reads. Done once: selection.json says it is."""
    if (root / SELECTION).is_file():
        log.info("distilled corpus made earlier: %s", root / "distilled")
        return read_json(root / SELECTION)
    engine = api_engine(plan.teacher_job)  # the teacher as seq2seq-translate decodes it with these settings
    selection = {}
    for direction, sources, references in training_pairs(plan.corpus):
        if plan.targets.trained_targets == "references":
            selection[direction.name] = {"lines": len(sources), "kept": len(sources), "targets": "references"}
            kept = (sources, references)
            log.info("%s: %d pairs with their references, in %s", direction.name, len(sources), root / "distilled")
        else:
            selection[direction.name], kept = distil_direction(plan, engine, direction.name, sources, references)
        _write(root / "distilled", "train", {direction.name: kept})
    held_out = {split: dict(pairs) for split, pairs in plan.held_out.items()}
    for item in plan.back_translated:
        entry, (train, held_out["valid"][item.direction.name]) = back_translate_direction(plan, engine, item)
        _write(root / "distilled", "train", {item.direction.name: train})
        made_for = [name for name, earlier in selection.items() if earlier.get("translations") == entry["translations"]]
        if made_for:  # a distilled direction's translations, reused: their time is counted there, once
            entry.update(teacher_seconds=None, teacher_lines_per_second=None, translations_of=made_for[0])
        selection[item.direction.name] = entry
    for split, pairs in held_out.items():
        _write(root / "original", split, pairs)
    write_new_json(root / SELECTION, selection)
    return selection


def distil_direction(
    plan: DistillPlan, engine: TranslatorAPI, name: str, sources: list[str], references: list[str]
) -> tuple[dict[str, Any], tuple[list[str], list[str]]]:
    """One direction's training pairs, translated by the teacher, a target chosen per line and bad lines
    dropped: its entry of selection.json, and the pairs kept."""
    nbests, progress, cached = teacher_translations(plan.translations, engine, name, sources)
    targets = plan.targets
    kept = select(sources, nbests, references, targets.select, targets.min_score)
    log.info(
        "%s: %d of %d lines kept (%d empty, %d below min_score=%g)",
        *(name, len(kept.sources), len(sources), kept.dropped_empty, kept.dropped_low_score),
        targets.min_score,
    )
    entry = {
        "lines": len(sources),
        "kept": len(kept.sources),
        "dropped_empty": kept.dropped_empty,
        "dropped_low_score": kept.dropped_low_score,
        **translation_figures(progress, cached),
    }
    return entry, (kept.sources, kept.targets)


def back_translate_direction(
    plan: DistillPlan, engine: TranslatorAPI, item: BackTranslated
) -> tuple[dict[str, Any], tuple[tuple[list[str], list[str]], tuple[list[str], list[str]]]]:
    """One back_translate= direction x-y: the training and validation pairs of p-y with their p side
    translated into x by the teacher (back_translation.py); a line translated to nothing is dropped.
    Returns its entry of selection.json, and its training and validation pairs."""
    one = direction_settings(plan.corpus, item.pairs_from)
    entry: dict[str, Any] = {"pivot": item.pivot, "pairs_from": item.pairs_from.name}
    made = []
    for split in ("train", "valid"):  # the validation pairs as the plan read them (read once)
        sources, references = (
            split_pairs(one, split) if split == "train" else plan.held_out[split][item.pairs_from.name]
        )
        nbests, progress, cached = teacher_translations(plan.translations, engine, item.translated_by.name, sources)
        kept = [(best[0], reference) for best, reference in zip(nbests, references, strict=True) if best[0].strip()]
        made.append(([s for s, _ in kept], [t for _, t in kept]))
        log.info(
            "%s (%s): %d of %d %s pairs of %s, their %s side translated into %s (%d empty dropped)",
            *(item.direction.name, split, len(kept), len(sources), split, item.pairs_from.name, item.pivot),
            item.direction.src,
            len(sources) - len(kept),
        )
        if split == "train":
            entry.update(lines=len(sources), kept=len(kept), dropped_empty=len(sources) - len(kept))
            entry.update(translation_figures(progress, cached))
    return entry, (made[0], made[1])


def translation_figures(progress: Progress, cached: Path) -> dict[str, Any]:
    """A selection.json entry's account of the teacher's translations it was made from."""
    return {
        # To the millisecond: one decimal wrote a small corpus's measured time as 0.0.
        "teacher_seconds": round(progress.seconds, 3),
        "teacher_lines_per_second": round(progress.lines / progress.seconds, 1) if progress.seconds else None,
        "translations": str(cached),
    }


def original_training_pairs(plan: DistillPlan, root: Path) -> None:
    """data/original/train.*: the references the baseline trains on (baseline=true may come on a rerun),
    and the back-translated directions' pairs as the student has them (they have no references)."""
    for direction, sources, references in training_pairs(plan.corpus):
        _write(root / "original", "train", {direction.name: (sources, references)})
        log.info("%s: %d pairs with their references, in %s", direction.name, len(sources), root / "original")
    for item in plan.back_translated:
        pairs = read_pairs(root / "distilled", "train", item.direction)
        _write(root / "original", "train", {item.direction.name: pairs})


def _write(folder: Path, split: str, pairs: Pairs) -> None:
    """The pairs' files in `folder` as the student reads them (data/parallel_corpus.py), each replaced
    whole (replacing.write_files_into)."""
    write_files_into(folder, functools.partial(write_pairs, split=split, pairs=pairs))
