"""data.clean: each rule against hand-made pairs (the expected drops counted by hand), the order
rules are met in, the report, and what cleaning never touches."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRAIN, compose_config

from seq2seq.config import (
    CLEAN_RULES,
    DEFAULT_CLEAN_RULES,
    HARD_CLEAN_RULES,
    CleanSettings,
    CorpusConfig,
    DataConfig,
    UserError,
    clean_rules,
)
from seq2seq.data.cleaning import Cleaner, CleaningReport, SeenHashes, normalised, summary
from seq2seq.data.language_id import identifier
from seq2seq.data.pipeline import prepare_data

GOOD = ("A man is riding a bicycle down the street.", "Ein Mann fährt mit dem Fahrrad die Straße hinunter.")


@functools.cache
def english_german_or_french() -> object:
    return identifier(["en", "de", "fr"])  # a second or more to load: once


def drops(rule: str, pairs: list[tuple[str, str]], **settings) -> list[bool]:
    """Which of `pairs` the rule alone drops, in order."""
    found = english_german_or_french() if rule == "language" else None
    cleaner = Cleaner((rule,), CleanSettings(**settings), "en", "de", found, CleaningReport(), "t")
    return [not cleaner.keep(src, tgt) for src, tgt in pairs]


def test_control_chars():
    pairs = [GOOD, ("A man\x07 rides.", "Ein Mann fährt."), ("A man rides.", "Ein Mann\ufffd fährt."),
             ("A\ttab.", "Ein Tab."), ("A man rides.", "Ein Mann fährt\ue000."), ("Café, naïve — “quoted”.", "Café.")]  # fmt: skip
    assert drops("control_chars", pairs) == [False, True, True, True, True, False]


def test_length_in_characters_and_words():
    pairs = [GOOD, ("   ", "Leer."), ("x" * 61, "kurz genug"), ("a " * 11, "zu viele Wörter"), ("ok", "ja")]
    assert drops("length", pairs, min_chars=2, max_chars=60, max_words=10) == [False, True, True, True, False]


def test_length_ratio_in_characters_and_words_from_its_minimum_length():
    pairs = [
        GOOD,
        ("Yes.", "Ja, das stimmt so."),  # longer side 15 visible characters: judged, ratio 15/4 > 3
        ("Yes.", "Ja, stimmt."),  # longer side under 15 characters: too short to judge
        ("A big dog runs on the beach.", "Ein Hund."),  # 22/8 characters, but 7 words against 2
        ("Aaaaaaaaaaaaaaaaaaa", "Bbbbbbbbbbb"),  # 19/11 characters, 1 word each
    ]
    assert drops("length_ratio", pairs) == [False, True, False, True, False]


def test_few_letters_and_mostly_symbols():
    pairs = [GOOD, ("12", "12"), ("A", "Ein Mann."), ("1.234.567,89 € (2019)", "1.234.567,89 € (2019)"),
             ("Page 12 of 340", "Seite 12 von 340")]  # fmt: skip
    assert drops("few_letters", pairs) == [False, True, True, True, False]
    # "1.234.567,89 € (2019)": 18 visible characters, none a letter; "Page 12 of 340": 5 of 11 symbols
    assert drops("mostly_symbols", pairs) == [False, True, False, True, False]


def test_markup():
    pairs = [GOOD, ("See https://example.org", "Siehe dort."), ("A <b>bold</b> man.", "Ein Mann."),
             ("Tom &amp; Jerry", "Tom und Jerry"), ("A man < a woman > a child.", "Ein Mann."),
             ("Visit www.example.com", "Besuche uns."), ("[[Category:Dogs]]", "Hunde")]  # fmt: skip
    assert drops("markup", pairs) == [False, True, True, True, False, True, True]


def test_identical_and_near_identical_sides():
    pairs = [GOOD, ("A man rides.", "A man rides."), ("A man rides.", "a man rides!"),
             ("The Beatles in Hamburg", "Die Beatles in Hamburg"), ("Berlin", "Berlin ist schön")]  # fmt: skip
    assert drops("identical", pairs) == [False, True, True, True, False]
    assert drops("identical", pairs[3:4], max_similarity=1.0) == [False]


def test_exact_and_normalised_duplicates_keep_the_first():
    pairs = [GOOD, GOOD, ("A man rides.", "Ein Mann fährt."), ("a man rides", "ein mann fährt!"), GOOD]
    assert drops("duplicate", pairs) == [False, True, False, False, True]
    assert drops("near_duplicate", pairs) == [False, True, False, True, True]


def test_a_side_in_the_wrong_language():
    pairs = [
        GOOD,
        ("A man is riding a bicycle down the street.", "A man is riding a bicycle down the street too."),
        ("Ein Mann fährt mit dem Fahrrad die Straße hinunter.", "Ein Mann fährt mit dem Fahrrad die Straße."),
        ("Two dogs.", "Zwei Hunde."),  # shorter than language_min_chars: not judged
    ]
    assert drops("language", pairs) == [False, True, True, False]
    # A French target, French being among the candidates
    french = ("A man is riding a bicycle down the street.", "Un homme fait du vélo dans la rue.")
    assert drops("language", [french]) == [True]


def test_a_pair_is_counted_under_the_first_rule_that_drops_it_and_samples_are_kept():
    report = CleaningReport()
    pairs = [GOOD, GOOD, GOOD, ("<p>\x07</p>", "x"), ("same text here", "same text here")]
    rules = tuple(r for r in HARD_CLEAN_RULES if r != "language")
    cleaner = Cleaner(rules, CleanSettings(report_samples=1), "en", "de", None, report, "web")
    assert [cleaner.keep(*pair) for pair in pairs] == [True, False, False, False, False]
    entry = report.to_dict()["streams"]["web"]
    assert entry["read"] == 5 and entry["kept"] == 1
    assert entry["dropped"]["duplicate"] == 2 and entry["dropped"]["control_chars"] == 1
    assert entry["dropped"]["identical"] == 1 and entry["dropped"]["markup"] == 0
    assert entry["samples"]["duplicate"] == [list(GOOD)]  # report_samples=1
    assert summary(report.to_dict()) == "web: kept 1 of 5 (control_chars 1, identical 1, duplicate 2)"


def test_the_language_rule_refuses_codes_it_does_not_know():
    with pytest.raises(UserError, match="the language rule knows none of src, tgt"):
        Cleaner(("language",), CleanSettings(), "src", "tgt", None, CleaningReport(), "t")


def test_normalised_keeps_letters_case_folded():
    assert normalised("  Straße, 12 MEN!  ") == "strasse men"


def test_rule_names_default_hard_and_none():
    assert clean_rules("default") == DEFAULT_CLEAN_RULES == CLEAN_RULES and clean_rules("none") == ()
    assert clean_rules("hard") == tuple(rule for rule in CLEAN_RULES if rule != "alignment")
    assert clean_rules(["language", "length"]) == ("length", "language")  # CLEAN_RULES' order
    with pytest.raises(UserError, match=r"data.clean=\['lenght'\]: lenght: not a rule"):
        clean_rules(["lenght"])


# ---- through prepare_data: the report, the refusal, validation untouched --------------------------


def tsv(path: Path, pairs: list[tuple[str, str]]) -> str:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    return str(path)


def sentences(n: int) -> list[tuple[str, str]]:
    """n pairs that differ in their letters (digits alone would make them near-duplicates)."""
    names = ["".join(chr(ord("a") + int(d)) for d in str(i)) for i in range(n)]
    return [(f"the man called {name} rides a bike", f"der mann namens {name} fährt rad") for name in names]


def test_the_report_goes_to_the_cache_and_validation_is_not_cleaned(tmp_path, caplog):
    caplog.set_level("INFO")
    train = sentences(20) + sentences(5) + [("see http://x.org", "siehe")]
    valid = sentences(3) * 2  # duplicates: kept, validation is scored as given
    cfg = DataConfig(
        kind="tsv",
        train=tsv(tmp_path / "train.tsv", train),
        valid=tsv(tmp_path / "valid.tsv", valid),
        clean=["duplicate", "markup"],
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    data = prepare_data(cfg)
    assert len(data.train) == 20 and len(data.valid) == 6
    entry = data.cleaning["streams"]["train"]
    assert entry["dropped"] == {"markup": 1, "duplicate": 5} and entry["read"] == 26
    assert any(
        "cleaning (data.clean): train: kept 20 of 26 (markup 1, duplicate 5)" in r.getMessage() for r in caplog.records
    )
    again = prepare_data(cfg)  # from the cache: the same report
    assert again.cleaning == data.cleaning
    on_disk = next((tmp_path / "cache").glob("*/cleaning.json"))
    assert json.loads(on_disk.read_text()) == data.cleaning


def test_a_rule_that_drops_every_pair_is_refused_with_the_counts(tmp_path):
    cfg = DataConfig(
        kind="tsv",
        valid=tsv(tmp_path / "valid.tsv", sentences(3)),
        corpora=[
            CorpusConfig(name="good", kind="tsv", train=tsv(tmp_path / "a.tsv", sentences(10))),
            CorpusConfig(name="web", kind="tsv", train=tsv(tmp_path / "b.tsv", [("<b>x</b> y", "z w")] * 4)),
        ],
        clean=["markup"],
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    with pytest.raises(UserError, match="every one of the 4 training pairs of web was dropped \\(markup 4\\)"):
        prepare_data(cfg)
    assert not list((tmp_path / "cache").glob("*/train"))  # nothing published


def test_a_corpus_s_own_rules_replace_data_clean(tmp_path):
    cfg = DataConfig(
        kind="tsv",
        valid=tsv(tmp_path / "valid.tsv", sentences(3)),
        corpora=[
            CorpusConfig(name="mine", kind="tsv", train=tsv(tmp_path / "a.tsv", sentences(10) * 2), clean="none"),
            CorpusConfig(name="crawl", kind="tsv", train=tsv(tmp_path / "b.tsv", sentences(10) * 2)),
        ],
        clean="default",
        src_lang="en",
        tgt_lang="de",
        clean_settings=CleanSettings(language_min_chars=1000),
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    data = prepare_data(cfg)
    assert data.cleaning["streams"]["mine"]["kept"] == 20
    assert data.cleaning["streams"]["crawl"]["kept"] == 10
    assert data.cleaning["streams"]["crawl"]["dropped"]["duplicate"] == 10


def test_seen_hashes_answer_as_a_set_does_across_merges():
    rng = np.random.default_rng(0)
    keys = [int(k) for k in rng.integers(0, 2**63, size=300, dtype=np.uint64)]
    keys += keys[:100] + [2**64 - 1, 0, 2**64 - 1]  # repeats, after merges; the ends of the range
    seen, expected = SeenHashes(buffer=16), set()
    for key in keys:
        assert seen.seen_or_add(key) == (key in expected)
        expected.add(key)
    assert len(seen) == len(expected) and len(seen.merged) > 0


@pytest.mark.slow  # a training run
def test_a_run_keeps_its_cleaning_report_and_overwrite_takes_it_back(tmp_path):
    from conftest import TINY_TRAIN, compose_config

    from seq2seq.cli.train import train
    from seq2seq.train.run_outputs import clear_earlier_run

    overrides = [*TINY_TRAIN, "max_steps=2", "data.clean=[duplicate,few_letters]", f"data.cache_dir={tmp_path / 'c'}"]
    train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    report = json.loads((tmp_path / "run" / "cleaning.json").read_text())
    cached = json.loads(next((tmp_path / "c").glob("*/cleaning.json")).read_text())
    assert report == cached and report["streams"]["train"]["read"] == 400
    assert "cleaning.json" in clear_earlier_run(tmp_path / "run")  # overwrite=true: the earlier run's, removed
    assert not (tmp_path / "run" / "cleaning.json").exists()


def test_a_rule_that_drops_every_pair_stops_a_run_before_its_first_update(tmp_path):
    from seq2seq.cli.train import train

    valid = tsv(tmp_path / "valid.tsv", sentences(3))
    good, web = tsv(tmp_path / "a.tsv", sentences(10)), tsv(tmp_path / "b.tsv", [("<b>x</b> y", "z w")] * 4)
    overrides = [
        *TINY_TRAIN,
        "data=tsv",
        "data.train=null",
        f"data.valid='{valid}'",
        f"data.corpora=[{{name:good,kind:tsv,train:'{good}'}},{{name:web,kind:tsv,train:'{web}'}}]",
        "data.clean=[markup]",
        "data.vocab_size=300",
        f"data.cache_dir='{tmp_path / 'cache'}'",
    ]
    with pytest.raises(
        UserError, match=r"^data.clean: every one of the 4 training pairs of web was dropped \(markup 4\)"
    ):
        train(compose_config("train", overrides), tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "tb").exists()
