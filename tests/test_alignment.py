"""data.clean's alignment rule (seq2seq/data/alignment.py): IBM Model 1's tables against a textbook
implementation in plain Python, and the rule against pairs whose alignment the test made."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest

from seq2seq.config import CLEAN_RULES, DEFAULT_CLEAN_RULES, CleanSettings, UserError, clean_rules
from seq2seq.data.alignment import NULL, AlignmentScorer, learn_table, words
from seq2seq.data.cleaning import Cleaner, CleaningReport

KOEHN = [("das Haus", "the house"), ("das Buch", "the book"), ("ein Buch", "a book"), ("ein Haus", "a house")]


def textbook_model1(pairs: list[tuple[list[str], list[str]]], iterations: int) -> dict[tuple[str, str], float]:
    """Koehn's "Statistical Machine Translation", figure 4.3, with NULL: t(f | e) from uniform."""
    t: dict[tuple[str, str], float] = defaultdict(lambda: 1.0)
    for _ in range(iterations):
        count: dict[tuple[str, str], float] = defaultdict(float)
        total: dict[str, float] = defaultdict(float)
        for source, target in pairs:
            source = ["<NULL>", *source]
            for f in target:
                norm = sum(t[(e, f)] for e in source)
                for e in source:
                    count[(e, f)] += t[(e, f)] / norm
                    total[e] += t[(e, f)] / norm
        t = defaultdict(float, {(e, f): c / total[e] for (e, f), c in count.items()})
    return t


def test_model1_tables_equal_the_textbook_em() -> None:
    pairs = [(words(a), words(b)) for a, b in KOEHN]
    table = learn_table(pairs, iterations=5)
    expected = textbook_model1(pairs, iterations=5)
    target_size = len(table.target_ids)
    names = {i: w for w, i in table.source_ids.items()}
    got = {}
    for key, prob in zip(table.keys.tolist(), table.probs.tolist(), strict=True):
        e, f = divmod(key, target_size)
        f_word = next(w for w, i in table.target_ids.items() if i == f)
        got[("<NULL>" if e == NULL else names[e], f_word)] = prob
    assert got.keys() == expected.keys()
    for pair, prob in expected.items():
        assert got[pair] == pytest.approx(prob, abs=1e-12)
    assert got[("das", "the")] > 0.5 and got[("haus", "house")] > 0.5  # EM found the dictionary


def test_a_pairs_likelihood_is_model1s_formula() -> None:
    pairs = [(words(a), words(b)) for a, b in KOEHN]
    table = learn_table(pairs, iterations=3)
    t = textbook_model1(pairs, iterations=3)
    source, target = ["das", "buch", "unbekannt"], ["the", "book", "unseen"]
    by_hand = []
    for f in target:  # a pair of words never seen together counts 1e-7 (unknown words included)
        total = sum(t[(e, f)] if (e, f) in t else 1e-7 for e in ["<NULL>", *source])
        by_hand.append(math.log(total / (len(source) + 1)))
    assert table.log_likelihood(source, target) == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-9)


def made_corpus(seed: int, aligned: int, misaligned: int) -> tuple[list[tuple[str, str]], set[int]]:
    """A made-up language pair: a one-to-one dictionary of 400 words, each target its source's words
    translated in a shuffled order (a word of noise now and then); `misaligned` pairs take another
    pair's target. Returns the pairs and the indices of the misaligned ones."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)]
    dictionary = dict(zip(vocabulary, [f"x{i}" for i in rng.sample(range(400), 400)], strict=True))
    pairs = []
    for _ in range(aligned + misaligned):
        source = rng.choices(vocabulary, k=rng.randint(6, 14))
        target = [dictionary[w] for w in source]
        rng.shuffle(target)
        if rng.random() < 0.3:
            target.insert(rng.randrange(len(target) + 1), f"x{rng.randrange(400)}")
        pairs.append((" ".join(source), " ".join(target)))
    wrong = set(rng.sample(range(len(pairs)), misaligned))
    targets = [tgt for _, tgt in pairs]
    for i in wrong:
        pairs[i] = (pairs[i][0], targets[(i + 1 + rng.randrange(len(pairs) - 1)) % len(pairs)])
    return pairs, wrong


def test_the_rule_finds_the_misaligned_pairs_and_keeps_the_rest() -> None:
    pairs, wrong = made_corpus(seed=3, aligned=1500, misaligned=80)
    settings = CleanSettings()
    cleaner = Cleaner(("alignment",), settings, "en", "de", None, CleaningReport(), "made", head=lambda: pairs)
    dropped = {i for i, (src, tgt) in enumerate(pairs) if not cleaner.keep(src, tgt)}
    caught = len(dropped & wrong)
    assert caught >= 0.9 * len(wrong), f"caught {caught} of {len(wrong)}"
    assert len(dropped - wrong) <= 0.01 * (len(pairs) - len(wrong)), f"dropped {len(dropped - wrong)} aligned pairs"
    assert cleaner.report.dropped["alignment"] == len(dropped)


def test_the_tables_learn_from_the_head_alone() -> None:
    pairs, _ = made_corpus(seed=4, aligned=600, misaligned=0)
    settings = CleanSettings(alignment_pairs=150)
    seen = []

    def head():
        for pair in pairs:
            seen.append(pair)
            yield pair

    Cleaner(("alignment",), settings, "en", "de", None, CleaningReport(), "made", head=head)
    assert len(seen) == 150


def test_too_few_pairs_to_learn_from_is_one_line_naming_the_corpus() -> None:
    with pytest.raises(
        UserError, match=r"alignment rule .* data.corpora\[tiny\] has 4 with 1 to 80 words .* fewer than 100"
    ):
        AlignmentScorer(KOEHN, 3.0, "data.corpora[tiny]")


def test_alignment_is_named_by_choice_not_by_default() -> None:
    assert "alignment" in CLEAN_RULES and "alignment" not in DEFAULT_CLEAN_RULES
    assert clean_rules("default") == DEFAULT_CLEAN_RULES
    assert clean_rules(["default", "alignment"]) == (*DEFAULT_CLEAN_RULES, "alignment")
    assert clean_rules(["alignment", "length"]) == ("length", "alignment")
    with pytest.raises(UserError, match="the rules: default, control_chars"):
        clean_rules(["aligment"])
