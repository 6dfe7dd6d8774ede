"""result.json, teacher against student (`compare`): test scores, parameters, and decoding speed on the
same sentences.

Scores as scripts/reproduce.py computes them (sacreBLEU cased and lowercase, chrF, and BLEU on
lowercased Moses-tokenized text where sacremoses is installed), from the default engine and beam (seq2seq/decoding_defaults.py).
Speed: the same test lines decoded by each model with the default engine (a run's CTranslate2 export
where it has one) and with int8 (CTranslate2's), on each of speed_threads, in lines per second. The
machine's load average is recorded beside the timings: a figure taken on a shared machine is not one
to publish.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seq2seq import cpu_sharing
from seq2seq.config import UserError
from seq2seq.inference.corpus_scores import corpus_bleu, corpus_chrf
from seq2seq.inference.loading import load
from seq2seq.inference.translator_api import one_line

if TYPE_CHECKING:
    from seq2seq.distill.plan import DistillPlan

log = logging.getLogger("seq2seq.distill")
ENGINES = {"default": "auto", "int8": "int8"}  # what speed["..."] names -> the precision= decoding with it


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
        "teacher": model_report(plan.teacher.paths, pairs, lines, threads),
        "student": {
            **model_report([str(student)], pairs, lines, threads),
            "run": str(student),
            "steps": summary["step"],
            "train_minutes": round(summary["minutes"], 2),
        },
    }
    if baseline is not None and plan.baseline is not None:
        trained = plan.baseline.run_dir
        engine_scores = test_scores([str(trained)], pairs, 2 if 2 in threads else max(threads))
        result["baseline"] = {**engine_scores, "run": str(trained), "steps": baseline["step"]}
    teacher_speed, student_speed = result["teacher"]["lines_per_second"], result["student"]["lines_per_second"]
    result["speedup"] = round(student_speed / teacher_speed, 2) if teacher_speed and student_speed else None
    result["bleu_lowercase_gap"] = round(result["teacher"]["bleu_lowercase"] - result["student"]["bleu_lowercase"], 2)
    result["speed_lines"] = min(lines, len(next(iter(pairs.values()))[0]))
    result["load_average_during_speed"] = [load_before, round(os.getloadavg()[0], 2)]
    result["other_threads_before_speed"] = None if others is None else round(others, 1)
    result["machine"] = machine()
    result["name"] += f".{result['machine']['cpu_capability'].lower().replace(' ', '_')}"
    return result


def scores(hypotheses: list[str], references: list[str], language: str) -> dict[str, Any]:
    result = {
        "bleu": round(corpus_bleu(hypotheses, references).score, 2),
        "bleu_lowercase": round(corpus_bleu(hypotheses, references, lowercase=True).score, 2),
        "chrf": round(corpus_chrf(hypotheses, references).score, 2),
        "bleu_moses_lowercase": None,
    }
    if importlib.util.find_spec("sacremoses") is not None:  # the dev extra: the Multi30k papers' figure
        import sacremoses

        moses = sacremoses.MosesTokenizer(lang=language)
        tokens = [moses.tokenize(line, escape=False, return_str=True) for line in [*hypotheses, *references]]
        score = corpus_bleu(tokens[: len(hypotheses)], tokens[len(hypotheses) :], lowercase=True, pretokenized=True)
        result["bleu_moses_lowercase"] = round(score.score, 2)
    return result


def parameters(paths: list[str]) -> int:
    """The parameters of the model (an ensemble's: all its members'), counted as training logs them."""
    from seq2seq.artifacts.checkpoint import model_from_checkpoint
    from seq2seq.artifacts.model_files import read_model_file
    from seq2seq.artifacts.path_kind import PathKind, path_kind
    from seq2seq.artifacts.run_dir import RunDir

    total = 0
    for path in paths:
        file = RunDir(path).model_file() if path_kind(path) is PathKind.RUN else Path(path)
        model = model_from_checkpoint(read_model_file(file)[1])
        total += sum(p.numel() for p in model.parameters())
    return total


def model_path(paths: list[str]) -> str | list[str]:
    return paths[0] if len(paths) == 1 else paths


def test_scores(paths: list[str], held_out: dict[str, tuple[list[str], list[str]]], threads: int) -> dict[str, Any]:
    """Each direction's test scores (the default beam and engine); a model of several directions also
    gets the mean of theirs as its own."""
    engine = load(model_path(paths), threads=threads)
    by_direction = {}
    for name, (sources, references) in held_out.items():
        translated = engine.with_languages(*name.split("-")).translate(sources)
        by_direction[name] = scores([one_line(t) for t in translated], references, name.split("-")[1])
    result: dict[str, Any] = {"engine": engine.kind}
    if len(by_direction) == 1:
        return {**result, **next(iter(by_direction.values()))}
    for key in ("bleu", "bleu_lowercase", "chrf"):
        result[key] = round(sum(s[key] for s in by_direction.values()) / len(by_direction), 2)
    return {**result, "test_by_direction": by_direction}


def speed(paths: list[str], direction: str, lines: list[str], threads: list[int]) -> dict[str, dict[str, Any]]:
    """Lines per second decoding `lines` at the default beam, by engine and thread count; an engine that cannot
    decode this model (int8 without a CTranslate2 export, an ensemble) gets its reason instead."""
    measured: dict[str, dict[str, Any]] = {}
    src, tgt = direction.split("-")
    for name, precision in ENGINES.items():
        measured[name] = {}
        for count in threads:
            try:  # the languages at load: int8's one-off timing decodes, and a multilingual model needs them
                engine = load(model_path(paths), threads=count, precision=precision, src_lang=src, tgt_lang=tgt)
            except UserError as err:
                measured[name] = {"unavailable": str(err)}
                break
            engine.translate(lines[:8])  # warm-up: the first batch allocates
            began = time.perf_counter()
            engine.translate(lines)
            measured[name][str(count)] = round(len(lines) / (time.perf_counter() - began), 1)
    return measured


def model_report(
    paths: list[str], held_out: dict[str, tuple[list[str], list[str]]], speed_lines: int, threads: list[int]
) -> dict[str, Any]:
    """A model's entry of result.json: scores, parameters, speed, and `lines_per_second`: the default
    engine's on 2 threads (the largest measured where 2 was not)."""
    name, (sources, _) = next(iter(held_out.items()))
    main_threads = 2 if 2 in threads else max(threads)
    report = test_scores(paths, held_out, main_threads)
    report["parameters"] = parameters(paths)
    report["speed"] = speed(paths, name, sources[:speed_lines], threads)
    report["lines_per_second"] = report["speed"]["default"].get(str(main_threads))
    log.info(
        "%s: test BLEU %.2f (lowercase %.2f), chrF %.2f; %s parameters; %s lines/s (%s engine, %d threads)",
        paths[0],
        report["bleu"],
        report["bleu_lowercase"],
        report["chrf"],
        f"{report['parameters']:,}",
        report["lines_per_second"],
        report["engine"],
        main_threads,
    )
    return report


def machine() -> dict[str, Any]:
    import torch

    from seq2seq.cpuinfo import cpu_name
    from seq2seq.precision import cpu_capability

    return {
        "cpu": cpu_name(),
        "cpu_capability": cpu_capability(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
