"""data.clean's rules scored against the noise scripts/make_noisy_multi30k.py put in: each rule's
precision and recall, and each kind of noise's share removed. Cleaning only, no training.

    python scripts/score_cleaning.py /tmp/noisy --json results/cleaning_noisy_multi30k.json \\
        --markdown results/cleaning_noisy_multi30k.md [--rules hard] [--languages fr]

The pairs go through seq2seq.data.cleaning's Cleaner, as training reads them, with
data.clean_settings' defaults. A rule's precision: of the pairs it dropped, the share that were noise
(of any kind); its recall: of the pairs of the noise it is meant for, the share it dropped (a pair
counts under the first rule that drops it, so a later rule's recall is of what earlier ones left).
The JSON also records the machine (CPU class, load average) and the lines per second, which are a
result only where the load average says the machine was idle.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from seq2seq.config import CLEAN_SETS, CleanSettings, clean_rules
from seq2seq.data.cleaning import Cleaner, CleaningReport
from seq2seq.data.corpus import iter_parallel
from seq2seq.data.language_id import identifier

CLEAN = "clean"
# The noise each rule is meant for (make_noisy_multi30k.py's kinds); misaligned pairs only the
# alignment rule's word tables see: no hard rule sees that a fluent German sentence translates another.
MEANT_FOR = {
    "control_chars": ("control_chars",),
    "length": ("overlong",),
    "length_ratio": ("extra_sentences",),
    "few_letters": ("symbols",),
    "mostly_symbols": ("symbols",),
    "markup": ("markup",),
    "identical": ("copy",),
    "duplicate": ("duplicate",),
    "near_duplicate": ("near_duplicate",),
    "language": ("french_target",),
    "alignment": ("misaligned",),
}


def score(reasons: list[str | None], labels: list[str], rules: tuple[str, ...]) -> dict:
    """Per rule and per kind of noise, from each line's dropping rule (None: kept) and its label."""
    by_rule = {}
    for rule in rules:
        dropped = [label for reason, label in zip(reasons, labels, strict=True) if reason == rule]
        meant = MEANT_FOR[rule]
        of_meant = sum(1 for label in labels if label in meant)
        caught = sum(1 for label in dropped if label in meant)
        noise = sum(1 for label in dropped if label != CLEAN)
        by_rule[rule] = {
            "dropped": len(dropped),
            "noise": noise,
            "precision": noise / len(dropped) if dropped else None,
            "meant_for": list(meant),
            "recall": caught / of_meant if of_meant else None,
        }
    by_noise = {}
    for kind in sorted(set(labels)):
        rows = [reason for reason, label in zip(reasons, labels, strict=True) if label == kind]
        rules_hit = Counter(reason for reason in rows if reason is not None)
        by_noise[kind] = {
            "pairs": len(rows),
            "dropped": sum(rules_hit.values()),
            "share_dropped": sum(rules_hit.values()) / len(rows),
            "by_rule": dict(rules_hit.most_common()),
        }
    noisy = [reason for reason, label in zip(reasons, labels, strict=True) if label != CLEAN]
    dropped_all = [label for reason, label in zip(reasons, labels, strict=True) if reason is not None]
    overall = {
        "pairs": len(labels),
        "noise": len(noisy),
        "dropped": len(dropped_all),
        "precision": sum(1 for label in dropped_all if label != CLEAN) / max(len(dropped_all), 1),
        "recall": sum(1 for reason in noisy if reason is not None) / max(len(noisy), 1),
    }
    return {"rules": by_rule, "noise": by_noise, "overall": overall}


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(result: dict) -> str:
    lines = [
        "| rule | dropped | of them noise | precision | meant for | recall on it |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for rule, row in result["rules"].items():
        lines.append(
            f"| {rule} | {row['dropped']:,} | {row['noise']:,} | {percent(row['precision'])} | "
            f"{', '.join(row['meant_for'])} | {percent(row['recall'])} |"
        )
    o = result["overall"]
    lines.append(
        f"| **all rules** | {o['dropped']:,} | | {percent(o['precision'])} | any ({o['noise']:,} pairs) | "
        f"{percent(o['recall'])} |"
    )
    lines += ["", "| pairs labelled | pairs | dropped | share | by rule |", "| --- | ---: | ---: | ---: | --- |"]
    for kind, row in result["noise"].items():
        rules = ", ".join(f"{rule} {count:,}" for rule, count in row["by_rule"].items())
        lines.append(f"| {kind} | {row['pairs']:,} | {row['dropped']:,} | {percent(row['share_dropped'])} | {rules} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from machine import machine_info  # the CPU class and load average; imports torch, so not at import

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="make_noisy_multi30k.py's --out: train.en, train.de, noise.tsv")
    parser.add_argument("--rules", default="default", help="as data.clean: default, hard, or a comma-separated list")
    parser.add_argument("--languages", default="", help="as data.clean_settings.languages, comma-separated")
    parser.add_argument("--json")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    rules = clean_rules(args.rules if args.rules in CLEAN_SETS else args.rules.split(","), "--rules")
    extra = [code for code in args.languages.split(",") if code]
    settings = CleanSettings(languages=extra)
    found = identifier(sorted({"en", "de", *extra})) if "language" in rules else None

    def read_again():  # the alignment rule learns its word tables from the corpus's start
        return iter_parallel(corpus / "train.en", corpus / "train.de")

    start = time.perf_counter()  # the alignment rule's tables are learnt here: counted in the lines/s
    cleaner = Cleaner(rules, settings, "en", "de", found, CleaningReport(), "noisy", head=read_again)
    labels = [line.split("\t")[1].strip() for line in (corpus / "noise.tsv").read_text().splitlines()]
    reasons = [cleaner.reason(src, tgt) for src, tgt in iter_parallel(corpus / "train.en", corpus / "train.de")]
    seconds = time.perf_counter() - start
    result = score(reasons, labels, rules)
    result["settings"] = {"rules": list(rules), "languages": ["en", "de", *extra], "clean_settings": vars(settings)}
    result["lines_per_second"] = round(len(reasons) / seconds)
    result["machine"] = machine_info()
    print(markdown(result))
    machine = result["machine"]
    print(
        f"{result['lines_per_second']:,} lines/s on {machine['cpu']} ({machine['cpu_capability']}), one process, "
        f"load average {machine['load_average_1min']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(result))


if __name__ == "__main__":
    main()
