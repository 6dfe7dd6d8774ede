"""Lines per second of data.clean's rules over the noisy Multi30k of scripts/make_noisy_multi30k.py:
each rule alone, and data.clean=hard and =default (every rule, in training's order) together. Prints JSON.

    python scripts/bench_cleaning.py --data-dir data/multi30k [--languages fr] [--repeats 3] [--json out.json]
    python scripts/bench_cleaning.py --smoke    # a few hand-made lines, no data needed: checks it runs

The corpus is made in memory exactly as make_noisy_multi30k.py writes it (--seed, 0 by default: the
29,000 training pairs plus 9,667 noisy ones), and the pairs are held in memory before the clock starts,
so what is timed is the rules (seq2seq.data.cleaning's Cleaner, as training calls it), not reading
files. Each figure is the best of --repeats passes, each with a fresh Cleaner (the duplicate rules'
hashes start empty). A rule alone sees every pair; together, a pair stops at the first rule that drops
it, as in training, so the rules' rates do not add up to the total's. The language rule identifies
among en, de and --languages (docs/corpora.md measured both with and without fr).

A rate is a result only on an idle machine: the JSON records the machine and its load average
(scripts/machine.py), taken before and after the passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from seq2seq.config import CLEAN_RULES, CLEAN_SETS, CleanSettings
from seq2seq.data.cleaning import Cleaner, CleaningReport
from seq2seq.data.language_id import identifier

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
import make_noisy_multi30k  # noqa: E402

SMOKE_PAIRS = 60  # clean ones; a third as many noisy ones again


def smoke_corpus(n: int = SMOKE_PAIRS) -> tuple[list[str], list[str], list[str]]:
    """Hand-made multi-way lines (en, de, fr), each sentence its own, for --smoke."""
    ids = [f"{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(n)]
    en = [f"A man called {name} rides a red bike down the street." for name in ids]
    de = [f"Ein Mann namens {name} fährt mit einem roten Fahrrad die Straße hinunter." for name in ids]
    fr = [f"Un homme nommé {name} descend la rue sur un vélo rouge." for name in ids]
    return en, de, fr


def noisy_pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """make_noisy_multi30k.py's pairs for --seed, from --data-dir's Multi30k (--smoke: hand-made lines)."""
    if args.smoke:
        en, de, fr = smoke_corpus()
    else:
        data = Path(args.data_dir)
        en, de, fr = (make_noisy_multi30k.read(data / f"train.{lang}.gz") for lang in ("en", "de", "fr"))
    pairs, _ = make_noisy_multi30k.make(en, de, fr, share=1 / 3, seed=args.seed)
    return pairs


def one_pass(rules: tuple[str, ...], pairs: list[tuple[str, str]], languages: list[str]) -> tuple[float, int]:
    """Seconds to run `rules` over `pairs` with a fresh Cleaner, and the pairs they dropped."""
    found = identifier(languages) if "language" in rules else None
    settings = CleanSettings(languages=[code for code in languages if code not in ("en", "de")])
    start = time.perf_counter()  # the alignment rule learns its tables as the Cleaner is made: timed too
    cleaner = Cleaner(rules, settings, "en", "de", found, CleaningReport(), "noisy", head=lambda: pairs)
    for src, tgt in pairs:
        cleaner.reason(src, tgt)
    seconds = time.perf_counter() - start
    return seconds, cleaner.report.read - cleaner.report.kept


def measure(rules: tuple[str, ...], pairs: list[tuple[str, str]], languages: list[str], repeats: int) -> dict:
    passes = [one_pass(rules, pairs, languages) for _ in range(repeats)]
    best = min(seconds for seconds, _ in passes)
    return {"lines_per_second": round(len(pairs) / max(best, 1e-9)), "dropped": passes[0][1]}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from machine import machine_info  # imports torch: not at import, so --help stays quick

    pairs = noisy_pairs(args)
    languages = sorted({"en", "de", *(code for code in args.languages.split(",") if code)})
    load_before = round(os.getloadavg()[0], 2)
    # --smoke's few lines are too few for the alignment rule to learn from: it judges none of them there
    per_rule = {rule: measure((rule,), pairs, languages, args.repeats) for rule in CLEAN_RULES}
    sets = {
        name: {"rules": list(CLEAN_SETS[name]), **measure(CLEAN_SETS[name], pairs, languages, args.repeats)}
        for name in ("hard", "default")
    }
    return {
        "name": "bench_cleaning",
        "what": "lines per second of data.clean's rules over make_noisy_multi30k.py's corpus, in memory, one process",
        "corpus": {
            "made_from": "hand-made lines (--smoke)" if args.smoke else str(args.data_dir),
            "seed": args.seed,
            "pairs": len(pairs),
        },
        "languages": languages,
        "repeats": args.repeats,
        "per_rule": per_rule,
        "hard": sets["hard"],
        "default": sets["default"],
        "load_average_1min_before": load_before,
        "machine": machine_info(),  # its load_average_1min: after the passes
        "smoke": args.smoke,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(SCRIPTS.parent / "data" / "multi30k"))
    parser.add_argument("--seed", type=int, default=0, help="make_noisy_multi30k.py's --seed")
    parser.add_argument("--languages", default="", help="as data.clean_settings.languages, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="passes per figure; the fastest is kept")
    parser.add_argument("--smoke", action="store_true", help="a few hand-made lines and one pass: checks it runs")
    parser.add_argument("--json", help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 1
    if args.repeats < 1:
        sys.exit(f"error: --repeats {args.repeats}: give 1 or more")
    if not args.smoke and not (Path(args.data_dir) / "train.en.gz").is_file():
        sys.exit(f"error: --data-dir {args.data_dir}: no train.en.gz (Multi30k: scripts/get_multi30k.py)")
    result = bench(args)
    from machine import write_json_report  # imports torch: bench() has imported it by now

    write_json_report(result, args.json)


if __name__ == "__main__":
    main()
