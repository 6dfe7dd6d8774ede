"""Train, average, translate the test set and publish the scores of one experiment, in one command.

    python scripts/reproduce.py multi30k_en_de --data-dir data/multi30k --publish
    python scripts/reproduce.py multi30k_en_de --data-dir data/multi30k --minutes 30 --publish
    python scripts/reproduce.py builtin_reverse   # the built-in task: no data needed, a few minutes

Any experiment whose data has valid and test splits works: they are read through the run's own data
config, exactly as training read them.

1. `seq2seq-train experiment=<name>` (the real command, in a subprocess) for the experiment's budget;
2. averages the last periodic checkpoints, and keeps whichever of best.pt / last.pt / averaged.pt scores
   the higher BLEU on the *validation* split, then the length penalty for it the same way (the test set
   never chooses anything);
3. translates the test split (Multi30k: test_2016_flickr) with beam search and scores it with sacreBLEU (cased and
   case-insensitive, with signatures), chrF, and BLEU on lowercased Moses-tokenized text (the papers' figure); a multilingual run (data.directions) each direction's, with
   its tag (the checkpoint and length penalty chosen on the mean of the directions' validation BLEU), and
   with --zero-shot de-fr,... directions it was not trained on too, with each one's off-target rate (the
   share of output lines py3langid detects in another of the model's languages than the target);
4. prints the JSON and writes it, with a plot of the validation curve, into the run directory; with
   --publish, also results/<name>.{json,md,png}, results/table.md and the table in docs/results.md.
   Only Multi30k runs enter the table: a run on the built-in task checks the pipeline, it is no result.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
from omegaconf import OmegaConf

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.cli.average import average_files
from seq2seq.config import DataConfig, TranslateConfig
from seq2seq.data.corpus import iter_split, unzip
from seq2seq.data.directions import Direction, configured_directions, direction_config
from seq2seq.data.language_id import off_target_rate
from seq2seq.distill.output import MARKER, SETTINGS
from seq2seq.distill.teacher import read_teacher
from seq2seq.inference.job import decoding_job
from seq2seq.inference.translator import Translator
from seq2seq.inference.translator_api import one_line

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402
from results_page import replace_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STOPPED_LINE = re.compile(r"stopped: .* after \d+ updates in ([\d.]+) minutes")
PRECISION_LINE = re.compile(r"precision: (\w+) \((.*)\)$", re.MULTILINE)
# recipe=auto's choice with each candidate's precision, pace, spread and expected updates; and its close calls
RECIPE_LINES = re.compile(r"(?:^|\s)(recipe: (?:\S+ for |close call: ).*)$", re.MULTILINE)
ALLOCATOR_LINE = re.compile(r"device: .*, (\w+) allocator$", re.MULTILINE)
LOAD_SAMPLE_SECONDS = 30


def train(args: argparse.Namespace, run_dir: Path) -> tuple[float, list[float]]:
    """Runs the training command; returns its seconds and the 1-minute load average sampled every
    LOAD_SAMPLE_SECONDS meanwhile (a published figure needs the machine state it was taken in)."""
    command = [
        str(Path(sys.executable).parent / "seq2seq-train"),
        f"experiment={args.experiment}",
        f"data.dir={Path(args.data_dir).resolve()}",
        f"hydra.run.dir={run_dir}",
        "progress=false",
        *([f"max_minutes={args.minutes}"] if args.minutes else []),
        *args.overrides,
    ]
    print("+", " ".join(command), file=sys.stderr)
    start, loads = time.monotonic(), []
    process = subprocess.Popen(command, stdout=sys.stderr)  # stdout carries only the JSON result
    while True:
        try:
            process.wait(timeout=LOAD_SAMPLE_SECONDS)
            break
        except subprocess.TimeoutExpired:
            loads.append(round(os.getloadavg()[0], 2))
    loads.append(round(os.getloadavg()[0], 2))  # and at the end, so a short run has one sample too
    if process.returncode != 0:
        raise SystemExit(f"error: training exited with status {process.returncode}")
    return time.monotonic() - start, loads


def load_translator(checkpoint: Path, run_dir: Path, beam: int, length_penalty: float) -> Translator:
    cfg = TranslateConfig(run=str(run_dir), checkpoint=str(checkpoint), beam=beam, length_penalty=length_penalty)
    return Translator.from_job(decoding_job(cfg))


def translate_directions(translator: Translator, splits: dict, split: str) -> dict[str, list[str]]:
    """The translations of `split`'s sources of each direction of `splits` (held_out_splits), by direction,
    each asked of the model in its target language (a one-direction run's: untagged, as always)."""
    multilingual = translator.languages.tags is not None
    # One line each, as seq2seq-translate writes them: test.hyp holds what was scored, line for line.
    return {
        name: [
            one_line(text)
            for text in (translator.with_languages(*name.split("-")) if multilingual else translator).translate(
                pairs[split][0]
            )
        ]
        for name, pairs in splits.items()
    }


def pivot_languages(names: tuple[str, ...], trained: list[str]) -> dict[str, str]:
    """For each direction x-y of `names`, a language p with x-p and p-y among the trained directions (the
    first in their order): the way a translation can go instead, through p."""
    pivots = {}
    for name in names:
        source, target = name.split("-")
        through = [
            d.split("-")[1] for d in trained if d.startswith(f"{source}-") and f"{d.split('-')[1]}-{target}" in trained
        ]
        if through:
            pivots[name] = through[0]
    return pivots


def translate_pivots(translator: Translator, splits: dict, pivots: dict[str, str]) -> dict[str, list[str]]:
    """Each zero-shot direction's test sources translated into its pivot language, then those
    translations into its target, with the same model and settings as every direction."""
    translated = {}
    for name, pivot in pivots.items():
        source, target = name.split("-")
        middle = [one_line(t) for t in translator.with_languages(source, pivot).translate(splits[name]["test"][0])]
        translated[name] = [one_line(t) for t in translator.with_languages(pivot, target).translate(middle)]
    return translated


def mean_bleu(hypotheses: dict[str, list[str]], splits: dict, split: str) -> float:
    """Corpus BLEU of each direction's `split`, averaged over the directions (one direction: its BLEU)."""
    each = [sacrebleu.corpus_bleu(hypotheses[name], [splits[name][split][1]]).score for name in hypotheses]
    return round(sum(each) / len(each), 2)


def average_of_the_end(run_dir: Path, last_step: int, count: int = 5) -> Path | None:
    """The average of the run's final `count` checkpoints: the newest periodic ones, and last.pt when
    training stopped after the newest of them (a run stopped by its clock rarely ends on a multiple of
    save_every, and its final updates are the most annealed)."""
    directory = run_dir / "checkpoints"
    periodic = sorted(directory.glob("step_*.pt"), key=lambda p: int(p.stem.removeprefix("step_")))
    if not periodic:
        return None
    newest = int(periodic[-1].stem.removeprefix("step_"))
    files = periodic[-(count - 1) :] + [directory / "last.pt"] if last_step > newest else periodic[-count:]
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries only this script's JSON
        return average_files(files, directory / "averaged.pt")


def moses_lowercase_bleu(hypotheses: list[str], references: list[str], language: str) -> tuple[float, str]:
    """BLEU as the Multi30k papers report it (fairseq's scorer, multi-bleu.perl -lc): both sides through
    the Moses tokenizer (sacremoses, the Python port of tokenizer.perl, for `language`), then lowercased,
    and scored on those tokens as they stand (sacreBLEU with tokenize=none). Its score and a signature."""
    import sacremoses

    moses = sacremoses.MosesTokenizer(lang=language)

    def tokenized(line: str) -> str:
        return moses.tokenize(line, escape=False, return_str=True)

    bleu = sacrebleu.BLEU(tokenize="none", lowercase=True, force=True)  # lowercased after tokenizing, as -lc
    score = bleu.corpus_score([tokenized(h) for h in hypotheses], [[tokenized(r) for r in references]]).score
    return round(score, 2), f"sacremoses {sacremoses.__version__} tokenizer (lang {language}); {bleu.get_signature()}"


def scores(
    hypotheses: list[str], references: list[str], language: str, codes: tuple[str, ...] = ()
) -> dict[str, object]:
    """`language`: the target's, for the Moses tokenizer (a code it has no rules for gets its generic ones).
    `codes`: a multilingual model's languages, among which each line's language is detected for the
    off-target rate (the share of lines not in `language`; None where py3langid cannot tell them apart)."""
    cased, lowercase, chrf = sacrebleu.BLEU(), sacrebleu.BLEU(lowercase=True), sacrebleu.CHRF()
    moses, moses_signature = moses_lowercase_bleu(hypotheses, references, language)
    return {
        "bleu": round(cased.corpus_score(hypotheses, [references]).score, 2),
        "bleu_signature": str(cased.get_signature()),
        "bleu_lowercase": round(lowercase.corpus_score(hypotheses, [references]).score, 2),
        "bleu_lowercase_signature": str(lowercase.get_signature()),
        "bleu_moses_lowercase": moses,
        "bleu_moses_lowercase_signature": moses_signature,
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "chrf_signature": str(chrf.get_signature()),
        **({"off_target": off_target(hypotheses, language, codes)} if codes else {}),
    }


def off_target(hypotheses: list[str], language: str, codes: tuple[str, ...]) -> float | None:
    rate = off_target_rate(hypotheses, language, list(codes))
    return None if rate is None else round(rate, 4)


def validation_curve(run_dir: Path) -> list[list[float]]:
    """[update, minutes since training started, greedy validation BLEU] at each validation, from the
    run's own record of them: its TensorBoard events (tb/), each with its wall time (one training
    segment: reproduce.py does not resume)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not RunDir(run_dir).tb.is_dir():
        return []
    events = EventAccumulator(str(RunDir(run_dir).tb), size_guidance={"scalars": 0})  # 0: every point
    events.Reload()
    if "valid/bleu" not in events.Tags()["scalars"]:
        return []
    start = events.FirstEventTimestamp()  # the dashboard opened as training began
    return [
        [event.step, round((event.wall_time - start) / 60.0, 2), round(event.value, 2)]
        for event in events.Scalars("valid/bleu")
    ]


def plot_curve(result: dict, path: Path) -> None:
    """Validation BLEU against minutes of training, as a PNG beside the JSON."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, minutes, bleu = zip(*result["valid_bleu_curve"], strict=True)
    figure, axes = plt.subplots(figsize=(6, 4), dpi=100)
    axes.plot(minutes, bleu, marker="o")
    axes.set_xlabel("minutes of training")
    axes.set_ylabel("validation BLEU (greedy)")
    machine = result["machine"]
    cores = "" if trained_on_gpu(result) else f", {machine['cores']} cores"
    axes.set_title(f"{result['experiment']}: {hardware(result)}, {result['precision']}{cores}", fontsize=10)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def training_minutes(log: str) -> float:
    """The training time the run itself measured (summed over resumed parts)."""
    return round(sum(float(m) for m in STOPPED_LINE.findall(log)), 1)


def held_out_splits(saved_data_config: dict, zero_shot: tuple[str, ...] = ()) -> dict[str, dict]:
    """By direction ("en-de"; a one-direction run's "src_lang-tgt_lang"): its validation and test pairs,
    read through the run's own data config (not the training split); a multilingual run's each through
    its direction's config, as training read them. `zero_shot`: directions the run was not trained on,
    scored on their test split alone (they choose nothing)."""
    cfg = OmegaConf.merge(OmegaConf.structured(DataConfig), saved_data_config)
    trained = configured_directions(cfg)
    directions = {d.name: (direction_config(cfg, d), ("valid", "test")) for d in trained}
    directions.update({name: (direction_config(cfg, Direction(*name.split("-"))), ("test",)) for name in zero_shot})
    if not trained:
        directions = {f"{cfg.src_lang}-{cfg.tgt_lang}": (cfg, ("valid", "test"))}
    held_out = {}
    for name, (one, wanted) in directions.items():
        splits = {split: iter_split(one, split) for split in wanted}
        if splits["test"] is None:
            raise SystemExit(f"error: data.kind={cfg.kind} of this run has no test split to score ({name})")
        held_out[name] = {split: unzip(pairs) for split, pairs in splits.items()}
    return held_out


TABLE_HEADER = (
    "| experiment | CPU class or GPU | precision | training | test BLEU (cased) | test BLEU (lowercase) "
    "| test BLEU (lowercase, Moses-tokenized) | chrF | off-target | checkpoint | load during training | machine | config |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)
TABLE_START, TABLE_END = "<!-- results table: written by scripts/reproduce.py -->", "<!-- end of results table -->"
TABLE_DATA = "multi30k"  # the table's corpus; results on other data (the built-in task) stay out of it


def table_rows(result: dict) -> str:
    """One row per direction: a multilingual run's rows name theirs, "(zero-shot)" for an untrained one,
    "(back-translated)" for one learnt from back-translated pairs alone."""
    if "test_by_direction" not in result:
        return table_row(result)
    zero_shot, back_translated = set(result.get("zero_shot", ())), set(result.get("back_translated", ()))
    kinds = {**dict.fromkeys(zero_shot, ", zero-shot"), **dict.fromkeys(back_translated, ", back-translated")}
    rows = {f"{name}{kinds.get(name, '')}": test for name, test in result["test_by_direction"].items()}
    rows.update({f"{name}, pivot through {test['pivot']}": test for name, test in result.get("test_pivot", {}).items()})
    return "".join(
        table_row({**result, "test": test, "experiment": f"{result['experiment']} ({label})"})
        for label, test in rows.items()
    )


def table_row(result: dict) -> str:
    test, machine = result["test"], result["machine"]
    load = result.get("load_average_during_training")
    if load is not None:
        load_text = f"{load} (max {result['load_average_during_training_max']})"
    else:  # rows from before the sampling: the load at the end says whether the machine was shared
        load_text = f"not sampled; {machine['load_average_1min']} at the end"
    recipe = f", recipe {result['recipe']}" if result.get("recipe") not in (None, "fixed") else ""
    return (
        f"| {result['experiment']} | {hardware(result)} | {result['precision']} | "
        f"{result['train_minutes']:g} min, {result['steps']} updates{recipe} | {test['bleu']} | {test['bleu_lowercase']} | "
        f"{test.get('bleu_moses_lowercase', 'not scored')} | {test['chrf']} | {off_target_text(result, test)} | {result['checkpoint']} (beam {result['beam']}, length penalty {result['length_penalty']:g}) | "
        f"{load_text} | "
        f"{machine['cores']} cores, {machine['cpu']}, torch {machine['torch']} | `{result['config_hash']}` |\n"
    )


def off_target_text(result: dict, test: dict) -> str:
    """The off-target rate in percent: measured on a multilingual run's rows only (one direction's
    model has no other language to slip into); rows from before the measurement say so."""
    if "test_by_direction" not in result:
        return "n/a"
    rate = test.get("off_target", "not measured")
    return rate if isinstance(rate, str) else "undetectable" if rate is None else f"{100 * rate:.1f}%"


def hardware(result: dict) -> str:
    """What trained the run: the GPU's name for a run on CUDA, else the CPU class (rows from before the
    "hardware" field all trained on a CPU)."""
    return result.get("hardware") or result["machine"]["cpu_capability"]


def trained_on_gpu(result: dict) -> bool:
    return hardware(result) == result["machine"].get("gpu")


def hardware_of(device: str, machine: dict) -> str:
    """The class a run on `device` (the run's device= setting) trained on, on `machine`."""
    on_gpu = device.startswith("cuda") or device == "auto"
    return machine["gpu"] if on_gpu and machine.get("gpu") else machine["cpu_capability"]


def result_name(experiment: str, minutes: float | None, hardware_class: str) -> str:
    """One file per experiment, budget and CPU class or GPU: figures of different classes never
    overwrite (nor get compared with) each other."""
    budget = f"_{minutes:g}min" if minutes else ""
    return f"{experiment}{budget}.{re.sub(r'[^a-z0-9-]+', '_', hardware_class.lower())}"


def corpus_kind(run_dir: Path, data: dict) -> str:
    """The corpus a run's held-out pairs are: its data.kind, but a seq2seq-distill student's (it reads
    its teacher's validation and test pairs, copied into the distillation's folder) is its teacher's, so
    that its rows stand beside the teacher's in the table."""
    folder = run_dir.parent
    if (folder / MARKER).is_file() and (folder / SETTINGS).is_file():
        teacher = read_teacher(",".join(json.loads((folder / SETTINGS).read_text())["teacher"]))
        return teacher.config["data"]["kind"]
    return data["kind"]


def in_table(result: dict) -> bool:
    """A Multi30k result with test scores (results from before the "data" field were all Multi30k)."""
    scored = "test" in result or "test_by_direction" in result
    return scored and result.get("data", TABLE_DATA) == TABLE_DATA


def publish(result: dict, results: Path, page: Path | None) -> None:
    """results/<name>.{json,md,png}, then results/table.md with a row for every Multi30k result there,
    which also replaces the table between the markers in `page` (if it has them)."""
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{result['name']}.json").write_text(json.dumps(result, indent=2) + "\n")
    (results / f"{result['name']}.md").write_text(TABLE_HEADER + table_rows(result))
    plot_curve(result, results / f"{result['name']}.png")
    everything = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    table = TABLE_HEADER + "".join(table_rows(r) for r in everything if in_table(r))
    (results / "table.md").write_text(table)
    replace_table(page, TABLE_START, TABLE_END, table)


TRAINING_FIGURES = ("train_command_minutes", "load_average_during_training", "load_average_during_training_max")


def recipe_change(published: Path, result: dict) -> str | None:
    """What differs in recipe or precision from the row published under the same name on this class, if
    anything: then the two rows were not trained alike, and a score between them compares recipes."""
    try:
        earlier = json.loads(published.read_text())
    except (OSError, ValueError):
        return None
    changed = [
        f"{key} {earlier.get(key)} -> {result[key]}"
        for key in ("recipe", "precision")
        if earlier.get(key) != result[key]
    ]
    return f"this run trained differently from {published}: {', '.join(changed)}" if changed else None


def earlier_training_figures(run_dir: Path, steps: int) -> dict:
    """With --skip-training: what only the training's own reproduce.py could measure (its command's
    minutes, the load average while it trained), from the result.json it left in the run directory,
    when that result is of the same training (the same number of updates)."""
    path = run_dir / "result.json"
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    return {k: earlier.get(k) for k in TRAINING_FIGURES} if earlier.get("steps") == steps else {}


def choose(args: argparse.Namespace, run_dir: Path, last: dict, trained: dict) -> tuple:
    """The checkpoint and length penalty with the best validation BLEU (beam search): the chosen
    checkpoint, its length penalty, the averaging window, and the scores that chose them."""
    # best.pt (greedy validation BLEU), last.pt (the end of an annealed schedule), and the average of
    # the final checkpoints; beam search on the validation split chooses among them.
    candidates = [run_dir / "checkpoints" / "best.pt"]
    if load_checkpoint(candidates[0])["step"] != last["step"]:
        candidates.append(run_dir / "checkpoints" / "last.pt")
    # The averaging window is the run's: keep_checkpoints periodic checkpoints (a recipe sets it).
    window = args.average or last["config"]["keep_checkpoints"]
    if window > 1 and (averaged := average_of_the_end(run_dir, last["step"], window)):
        candidates.append(averaged)

    def valid_score(checkpoint: Path, length_penalty: float) -> float:
        """Validation BLEU (a multilingual run's: the mean of its directions')."""
        translator = load_translator(checkpoint, run_dir, args.beam, length_penalty)
        hypotheses = translate_directions(translator, trained, "valid")
        return mean_bleu(hypotheses, trained, "valid")

    # The checkpoint first (at length penalty 1.0), then the length penalty for it: two small
    # searches on the validation split instead of their product.
    valid_bleu = {checkpoint.name: valid_score(checkpoint, 1.0) for checkpoint in candidates}
    chosen = max(candidates, key=lambda c: valid_bleu[c.name])
    penalties = sorted({float(p) for p in args.length_penalties.split(",")} | {1.0})
    valid_bleu_by_penalty = {p: valid_bleu[chosen.name] if p == 1.0 else valid_score(chosen, p) for p in penalties}
    length_penalty = max(penalties, key=lambda p: (valid_bleu_by_penalty[p], p == 1.0))  # ties keep 1.0

    return chosen, length_penalty, window, valid_bleu, valid_bleu_by_penalty


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help="a file in configs/experiment/, e.g. multi30k_en_de")
    # Where scripts/get_multi30k.py puts it in the README's steps.
    parser.add_argument("--data-dir", default=str(ROOT / "data" / "multi30k"))
    parser.add_argument("--minutes", type=float, help="training budget (default: the experiment's max_minutes)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument(
        "--length-penalties",
        default="0.6,1.0,1.4",
        help="candidates for beam search's length penalty, chosen on the validation split",
    )
    parser.add_argument("--run-dir", help="default: outputs/reproduce/<experiment>[_<N>min]")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="write into --results and rewrite the table of --page (else: the run dir)",
    )
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--page", default=str(ROOT / "docs" / "results.md"), help="whose results table to rewrite")
    parser.add_argument("--skip-training", action="store_true", help="reuse the run in --run-dir")
    parser.add_argument("--average", type=int, help="checkpoints averaged (default: the run's keep_checkpoints)")
    parser.add_argument(
        "--zero-shot",
        default="",
        help="a multilingual run: directions it was not trained on to score too, e.g. de-fr,fr-de",
    )
    parser.add_argument(
        "--back-translated",
        default="",
        help="a student of seq2seq-distill back_translate=: the directions it learnt from back-translated pairs"
        " (e.g. de-fr,fr-de), labelled so and decoded through a pivot language too, as zero-shot ones are",
    )
    parser.add_argument(
        "--checkpoint",
        help="score this file of the run's checkpoints/ (e.g. best.pt) at the first of --length-penalties,"
        " choosing nothing on the validation split",
    )
    parser.add_argument("overrides", nargs="*", help="extra seq2seq-train overrides")
    args = parser.parse_intermixed_args()
    budget = f"_{args.minutes:g}min" if args.minutes else ""
    run_dir = Path(args.run_dir or ROOT / "outputs" / "reproduce" / f"{args.experiment}{budget}").resolve()

    train_seconds, loads = (0.0, []) if args.skip_training else train(args, run_dir)
    log = (run_dir / "train.log").read_text()
    last = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    zero_shot = tuple(name for name in args.zero_shot.split(",") if name)
    if zero_shot and not last["config"]["data"].get("directions"):
        raise SystemExit("error: --zero-shot: the run has one direction (data.directions is not set)")
    splits = held_out_splits(last["config"]["data"], zero_shot)
    trained = {name: pairs for name, pairs in splits.items() if name not in zero_shot}
    back_translated = tuple(name for name in args.back_translated.split(",") if name)
    if unknown := [name for name in back_translated if name not in trained]:
        raise SystemExit(f"error: --back-translated {','.join(unknown)}: the run was not trained on it")
    if args.checkpoint:  # as given: the validation split chooses nothing (a short comparison's arms)
        chosen, length_penalty = run_dir / "checkpoints" / args.checkpoint, float(args.length_penalties.split(",")[0])
        if not chosen.is_file():
            raise SystemExit(f"error: --checkpoint {args.checkpoint}: {chosen} does not exist")
        window, valid_bleu, valid_bleu_by_penalty = 1, {}, {}
    else:
        chosen, length_penalty, window, valid_bleu, valid_bleu_by_penalty = choose(args, run_dir, last, trained)

    start = time.monotonic()
    translator = load_translator(chosen, run_dir, args.beam, length_penalty)  # the test split's, and the pivots'
    hypotheses = translate_directions(translator, splits, "test")
    multilingual = bool(last["config"]["data"].get("directions"))
    # A multilingual model's languages: its outputs' off-target rate is measured among them.
    codes = tuple(dict.fromkeys(code for name in trained for code in name.split("-"))) if multilingual else ()
    test = {
        name: scores(hypotheses[name], pairs["test"][1], name.split("-")[1], codes) for name, pairs in splits.items()
    }
    # Zero-shot against the way there is without it: through a language the model was trained on both ways.
    pivots = pivot_languages((*zero_shot, *back_translated), list(trained))
    through = translate_pivots(translator, splits, pivots)
    test_pivot = {
        name: {"pivot": pivots[name], **scores(lines, splits[name]["test"][1], name.split("-")[1], codes)}
        for name, lines in through.items()
    }
    machine = machine_info()
    chosen_precision = PRECISION_LINE.findall(log)
    device = str(last["config"]["device"])
    hardware_class = hardware_of(device, machine)
    result = {
        "name": result_name(args.experiment, args.minutes, hardware_class),
        "experiment": args.experiment,
        "device": device,
        "hardware": hardware_class,
        "direction": ",".join(trained),
        "budget_minutes": args.minutes or last["config"]["max_minutes"],
        "train_minutes": training_minutes(log),
        "train_command_minutes": round(train_seconds / 60, 1) if train_seconds else None,  # with start-up
        "steps": last["step"],
        "recipe": last["config"].get("recipe"),  # what recipe=auto chose (or fixed); checkpoints before it: None
        "recipe_choice": RECIPE_LINES.findall(log),  # how recipe=auto chose, as the run logged it
        "averaged_checkpoints": window,
        "precision": last["config"]["precision"],
        "precision_reason": chosen_precision[-1][1] if chosen_precision else None,
        "data": corpus_kind(run_dir, last["config"]["data"]),
        "load_average_during_training": round(sum(loads) / len(loads), 2) if loads else None,
        "load_average_during_training_max": max(loads) if loads else None,
        "valid_bleu_curve": validation_curve(run_dir),  # [update, minutes, greedy BLEU]
        "valid_bleu_by_checkpoint": valid_bleu,
        "checkpoint": chosen.name,
        "beam": args.beam,
        "length_penalty": length_penalty,
        "valid_bleu_by_length_penalty": {f"{p:g}": b for p, b in valid_bleu_by_penalty.items()},
        **(
            {
                "test_by_direction": test,
                "zero_shot": list(zero_shot),
                "back_translated": list(back_translated),
                "test_pivot": test_pivot,
            }
            if multilingual
            else {"test": test[next(iter(test))]}
        ),
        "test_translate_seconds": round(time.monotonic() - start, 1),
        "config_hash": hashlib.sha256(json.dumps(last["config"], sort_keys=True).encode()).hexdigest()[:12],
        # What the training process ran on, as it logged it (this process is not preloaded with tcmalloc).
        "machine": {**machine, "allocator": allocators[-1] if (allocators := ALLOCATOR_LINE.findall(log)) else None},
    }
    if args.skip_training:
        result.update(earlier_training_figures(run_dir, result["steps"]))
    if change := recipe_change(Path(args.results) / f"{result['name']}.json", result):
        print(f"reproduce.py: warning: {change}", file=sys.stderr)
    if args.publish:
        publish(result, Path(args.results), Path(args.page) if args.page else None)
    else:
        (run_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        plot_curve(result, run_dir / "result.png")
    for name, lines in hypotheses.items():  # test.hyp; a multilingual run's test.en-de.hyp, ...
        (run_dir / (f"test.{name}.hyp" if multilingual else "test.hyp")).write_text("\n".join(lines) + "\n")
    for name, lines in through.items():  # test.de-fr.pivot-en.hyp
        (run_dir / f"test.{name}.pivot-{pivots[name]}.hyp").write_text("\n".join(lines) + "\n")
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
