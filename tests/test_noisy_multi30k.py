"""scripts/make_noisy_multi30k.py's labels and scripts/score_cleaning.py's precision and recall, on
hand-made lines."""

from __future__ import annotations

from collections import Counter

from script_module import load_script


def corpus(n: int) -> tuple[list[str], list[str], list[str]]:
    en = [f"A man number {chr(97 + i % 26)}{chr(97 + i // 26)} rides a red bike." for i in range(n)]
    return en, [s.replace("A man", "Ein Mann") for s in en], [s.replace("A man", "Un homme") for s in en]


def test_each_kind_of_noise_gets_its_share_and_the_clean_pairs_stay():
    maker = load_script("make_noisy_multi30k")
    en, de, fr = corpus(300)
    pairs, labels = maker.make(en, de, fr, share=1 / 3, seed=0)
    counts = Counter(labels)
    assert len(pairs) == 400 and counts["clean"] == 300
    assert {counts[kind] for kind in maker.NOISE} == {10}
    for (src, tgt), label in zip(pairs, labels, strict=True):
        if label == "copy":
            assert src == tgt
        if label == "french_target":
            assert tgt.startswith("Un homme")
    again = maker.make(en, de, fr, share=1 / 3, seed=0)
    assert again == (pairs, labels)  # a fixed seed: the same corpus


def test_of_a_duplicate_and_its_original_the_first_is_the_clean_one():
    maker = load_script("make_noisy_multi30k")
    en, de, fr = corpus(60)
    pairs, labels = maker.make(en, de, fr, share=1.0, seed=3)
    seen = set()
    for pair, label in zip(pairs, labels, strict=True):
        if label == "duplicate":
            assert pair in seen  # its clean twin came before it
        if label == "clean":
            seen.add(pair)


def test_precision_and_recall_per_rule_and_overall():
    scorer = load_script("score_cleaning")
    labels = ["clean", "clean", "copy", "copy", "markup", "misaligned"]
    reasons = [None, "markup", "identical", None, "markup", None]
    result = scorer.score(reasons, labels, ("identical", "markup"))
    assert result["rules"]["identical"] == {
        "dropped": 1, "noise": 1, "precision": 1.0, "meant_for": ["copy"], "recall": 0.5
    }  # fmt: skip
    assert result["rules"]["markup"]["precision"] == 0.5 and result["rules"]["markup"]["recall"] == 1.0
    assert result["overall"] == {"pairs": 6, "noise": 4, "dropped": 3, "precision": 2 / 3, "recall": 0.5}
    assert result["noise"]["misaligned"]["share_dropped"] == 0.0
