"""Multi30k en-de with the noise a crawled corpus has, and a file saying which line got which noise.

    python scripts/make_noisy_multi30k.py --out /tmp/noisy --data-dir data/multi30k

Writes train.en and train.de: the 29,000 clean training pairs plus a third as many noisy pairs again,
shuffled together with a fixed seed, and noise.tsv: each line's number (from 1) and its noise, or
"clean". The noise is made exactly from Multi30k's other languages and lines (it is multi-way):

    misaligned      an English source with another pair's German
    french_target   the French translation in place of the German
    copy            the English source copied into the target (source = target)
    duplicate       a clean pair again
    near_duplicate  a clean pair again, its case, punctuation and spacing changed
    overlong        thirty pairs joined on both sides (still a translation, too long to train on)
    extra_sentences a German target with two other pairs' German appended
    markup          HTML tags, an entity and a URL around a clean pair
    control_chars   a clean pair with a control character or U+FFFD in one side
    symbols         prices, times and ids, the same on both sides

Of a duplicate and its original, whichever comes first in the file is "clean" and the other the
noise: a cleaner keeps the first of a group. scripts/score_cleaning.py scores data.clean's rules
against noise.tsv. Validation and test stay Multi30k's own (data.dir).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

NOISE = (
    "misaligned",
    "french_target",
    "copy",
    "duplicate",
    "near_duplicate",
    "overlong",
    "extra_sentences",
    "markup",
    "control_chars",
    "symbols",
)
DUPLICATES = ("duplicate", "near_duplicate")
CLEAN = "clean"


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


def noisy_pair(kind: str, i: int, en: list[str], de: list[str], fr: list[str], rng: np.random.Generator) -> tuple:
    """One pair of `kind` made from clean pair i (and others drawn by `rng`)."""
    n = len(en)
    if kind == "misaligned":
        return en[i], de[(i + int(rng.integers(1, n))) % n]
    if kind == "french_target":
        return en[i], fr[i]
    if kind == "copy":
        return en[i], en[i]
    if kind == "duplicate":
        return en[i], de[i]
    if kind == "near_duplicate":
        return en[i].upper().rstrip(".") + " !", "  " + de[i].lower().replace(",", "").rstrip(".") + " ."
    if kind == "overlong":
        rows = rng.integers(0, n, size=30)
        return " ".join(en[r] for r in rows), " ".join(de[r] for r in rows)
    if kind == "extra_sentences":
        others = rng.integers(0, n, size=2)
        return en[i], " ".join([de[i], *(de[r] for r in others)])
    if kind == "markup":
        url = f"https://www.example-{i}.com/page?id={i}"
        return f'<div class="caption"><b>{en[i]}</b> &nbsp; {url}</div>', f"<p>{de[i]}</p> &raquo; {url}"
    if kind == "control_chars":
        char = ("\x00", "\x07", "\x1b", "\ufffd")[i % 4]
        cut = len(de[i]) // 2
        return (en[i], de[i][:cut] + char + de[i][cut:]) if i % 2 else (en[i][:cut] + char + en[i][cut:], de[i])
    if kind == "symbols":
        a, b, c = (int(x) for x in rng.integers(0, 10000, size=3))
        text = f"{a // 100}.{a % 100:02d} € | {b % 24:02d}:{b % 60:02d} | #{c} / {a}-{b}"
        return text, text
    raise ValueError(kind)


def make(en: list[str], de: list[str], fr: list[str], share: float, seed: int) -> tuple[list[tuple], list[str]]:
    """The noisy corpus's pairs and each line's label, shuffled together."""
    rng = np.random.default_rng(seed)
    total = round(len(en) * share)
    per_kind = [total // len(NOISE) + (k < total % len(NOISE)) for k in range(len(NOISE))]
    # rows: (source, target, label, group): group is the clean pair a duplicate copies, else -1
    rows = [(en[i], de[i], CLEAN, i) for i in range(len(en))]
    for kind, count in zip(NOISE, per_kind, strict=True):
        for i in rng.choice(len(en), size=count, replace=False):
            src, tgt = noisy_pair(kind, int(i), en, de, fr, rng)
            rows.append((src, tgt, kind, int(i) if kind in DUPLICATES else -1))
    rows = [rows[k] for k in rng.permutation(len(rows))]
    # The first line of each duplicate group is the one a cleaner keeps: that one is the clean one.
    labels = [label for _, _, label, _ in rows]
    first: dict[int, int] = {}
    original: dict[int, int] = {}
    copied = {group for _, _, label, group in rows if label in DUPLICATES}
    for position, (_, _, label, group) in enumerate(rows):
        if group in copied:
            first.setdefault(group, position)
            if label == CLEAN:
                original[group] = position
    for group, position in first.items():
        if labels[position] != CLEAN:  # a copy came first: it is kept, the original is the copy
            labels[position], labels[original[group]] = CLEAN, labels[position]
    return [(src, tgt) for src, tgt, _, _ in rows], labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[1] / "data" / "multi30k"))
    parser.add_argument("--share", type=float, default=1 / 3, help="noisy pairs per clean pair")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    en, de, fr = (read(data / f"train.{lang}.gz") for lang in ("en", "de", "fr"))
    pairs, labels = make(en, de, fr, args.share, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "train.en").open("w", encoding="utf-8") as src, (out / "train.de").open("w", encoding="utf-8") as tgt:
        for s, t in pairs:
            src.write(s + "\n")
            tgt.write(t + "\n")
    (out / "noise.tsv").write_text("".join(f"{n}\t{label}\n" for n, label in enumerate(labels, start=1)))
    counts = {label: labels.count(label) for label in (CLEAN, *NOISE)}
    print(json.dumps({"pairs": len(pairs), "labels": counts, "seed": args.seed}))


if __name__ == "__main__":
    main()
