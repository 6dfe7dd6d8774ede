"""data.clean's alignment rule (seq2seq/data/alignment.py): IBM Model 1's tables against a textbook
implementation in plain Python, the rule against pairs whose alignment the test made, and the rule as
training reads a corpus (cached, and streamed: its tables learnt once, not at every pass)."""

from __future__ import annotations

import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config

from seq2seq.cli.train import train
from seq2seq.config import (
    CLEAN_RULES,
    DEFAULT_CLEAN_RULES,
    CleanSettings,
    CorpusConfig,
    DataConfig,
    UserError,
    clean_rules,
)
from seq2seq.data.alignment import NULL, AlignmentScorer, learn_table, words
from seq2seq.data.cleaning import Cleaner, CleaningReport, summary
from seq2seq.data.corpus_plan import plan_corpus
from seq2seq.data.pipeline import keep_pair, prepare_data
from seq2seq.data.streaming import StreamingBatches
from seq2seq.data.tokenizer import EOS_ID

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


def test_a_corpus_too_small_to_learn_from_is_not_judged_and_the_report_says_why() -> None:
    # A 99-pair in-domain memory beside a crawl must not stop data.clean=default: it trains unjudged.
    pairs, wrong = made_corpus(seed=5, aligned=90, misaligned=9)
    report = CleaningReport()
    cleaner = Cleaner(
        ("alignment",), CleanSettings(), "en", "de", None, report, "data.corpora[memory]", head=lambda: pairs
    )
    assert all(cleaner.keep(src, tgt) for src, tgt in pairs)  # the misaligned 9 included
    entry = report.to_dict()["streams"]["data.corpora[memory]"]
    assert entry["kept"] == entry["read"] == 99 and entry["dropped"] == {"alignment": 0}
    assert re.fullmatch(
        r"data.corpora\[memory\] has 99 pairs with 1 to 80 words on both sides to learn word tables from, "
        r"fewer than 100: no pair of it was judged by this rule",
        entry["not_judged"]["alignment"],
    )
    assert summary(report.to_dict()) == "data.corpora[memory]: kept 99 of 99; alignment not judged: too few pairs"
    # One pair more and the same corpus is judged (by tables too thin to drop any pair here)
    pairs, _ = made_corpus(seed=5, aligned=91, misaligned=9)
    report = CleaningReport()
    cleaner = Cleaner(("alignment",), CleanSettings(), "en", "de", None, report, "m", head=lambda: pairs)
    assert cleaner.alignment.cut is not None and report.to_dict()["streams"]["m"]["not_judged"] == {}


def test_default_is_every_rule_and_hard_leaves_alignment_out() -> None:
    assert "alignment" in CLEAN_RULES and DEFAULT_CLEAN_RULES == CLEAN_RULES
    assert clean_rules("default") == CLEAN_RULES
    assert clean_rules("hard") == tuple(rule for rule in CLEAN_RULES if rule != "alignment")
    assert clean_rules(["hard", "alignment"]) == CLEAN_RULES
    assert clean_rules(["alignment", "length"]) == ("length", "alignment")
    with pytest.raises(UserError, match="the rules: default, hard, none, control_chars"):
        clean_rules(["aligment"])


# ---- the rule as training reads a corpus: learnt once per stream, cached or streamed -----------------


@pytest.fixture()
def learnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The label of every AlignmentScorer made (each learns both tables from a corpus's head)."""
    made: list[str] = []
    original = AlignmentScorer.__init__

    def counted(self, pairs, max_mads: float, label: str) -> None:
        made.append(label)
        original(self, pairs, max_mads, label)

    monkeypatch.setattr(AlignmentScorer, "__init__", counted)
    return made


def aligned_corpus(directory: Path, **settings) -> tuple[DataConfig, list[tuple[str, str]], set[tuple[str, str]]]:
    """made_corpus's pairs (with 40 misaligned) as parallel files, and the pairs the rule keeps, judged
    here by one Cleaner over the whole list."""
    pairs, _ = made_corpus(seed=5, aligned=400, misaligned=40)
    files = {}
    for split, lines in {"train": pairs, "valid": pairs[:5]}.items():
        for index, side in enumerate(("src", "tgt")):
            path = directory / f"{split}.{side}"
            path.write_text("".join(pair[index] + "\n" for pair in lines))
            files[f"{split}_{side}"] = str(path)
    cfg = DataConfig(
        kind="parallel_files",
        **files,
        vocab_size=300,
        clean=["alignment"],
        cache_dir=str(directory / "cache"),
        **settings,
    )
    cleaner = Cleaner(("alignment",), cfg.clean_settings, "en", "de", None, CleaningReport(), "t", head=lambda: pairs)
    kept = {pair for pair in pairs if cleaner.keep(*pair)}
    assert 0 < len(pairs) - len(kept) < 80  # the rule drops pairs here: what the tests below see it do
    return cfg, pairs, kept


def token_rows(batches) -> Counter:
    """(source ids, target ids) of every row of one update, read back from the padded tensors."""
    seen: Counter = Counter()
    for batch in batches:
        for src, tgt in zip(batch.src.tolist(), batch.tgt_out.tolist(), strict=True):
            seen[(tuple(src[: src.index(EOS_ID)]), tuple(tgt[: tgt.index(EOS_ID)]))] += 1
    return seen


def encoded(tokenizers, cfg: DataConfig, pairs: list[tuple[str, str]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The pairs as token ids, those the length filters (data.max_tokens, max_length_ratio) keep."""
    sources = tokenizers.encode_src([src for src, _ in pairs])
    targets = tokenizers.encode_tgt([tgt for _, tgt in pairs])
    rows = [(tuple(s), tuple(t)) for s, t in zip(sources, targets, strict=True)]
    return [(s, t) for s, t in rows if keep_pair(len(s), len(t), cfg.max_tokens, cfg.max_length_ratio) is None]


def streamed_epochs(batches: StreamingBatches, epochs: int) -> list[Counter]:
    seen = [Counter() for _ in range(epochs)]
    while True:
        update = batches.next_update(1, 0, 1)  # taken in the epoch the stream is in afterwards
        if batches.epoch > epochs:
            return seen
        seen[batches.epoch - 1] += token_rows(update)


def test_a_cached_corpus_learns_the_tables_once_and_keeps_what_the_rule_keeps(tmp_path: Path, learnings) -> None:
    cfg, pairs, kept = aligned_corpus(tmp_path)
    learnings.clear()
    data = prepare_data(cfg)
    assert learnings == ["train"]
    assert data.cleaning["streams"]["train"]["dropped"] == {"alignment": len(pairs) - len(kept)}
    assert data.stats.train_pairs == len(kept)


def test_a_streamed_corpus_learns_the_tables_once_for_every_epoch(tmp_path: Path, learnings) -> None:
    cfg, pairs, kept = aligned_corpus(tmp_path, streaming=True, stream_buffer_pairs=128)
    data = prepare_data(cfg)  # the head the tokenizer learns from: one pass, cleaned
    learnings.clear()
    batches = StreamingBatches(plan_corpus(cfg), data.tokenizers, batch_tokens=4096, seed=1, max_positions=256)
    epochs = streamed_epochs(batches, 3)
    # Before the fix each pass learnt the tables again: four times here (the 4th epoch opens).
    assert learnings == ["train"]
    # Every pass drops the same pairs, those one Cleaner over the corpus drops, counted here.
    expected = Counter(encoded(data.tokenizers, cfg, [pair for pair in pairs if pair in kept]))
    assert epochs == [expected] * 3


def test_streamed_corpora_learn_each_corpus_s_tables_once_for_all_its_passes(tmp_path: Path, learnings) -> None:
    cfg, pairs, kept = aligned_corpus(tmp_path, streaming=True, stream_buffer_pairs=128)
    tsv = tmp_path / "made.tsv"
    tsv.write_text("".join(f"{src}\t{tgt}\n" for src, tgt in pairs))
    plain = tmp_path / "plain.tsv"
    plain.write_text("".join(f"w{i} w{i + 1}\tx{i} x{i + 1}\n" for i in range(30)))
    cfg.corpora = [
        CorpusConfig(name="made", kind="tsv", train=str(tsv), weight=2.0),  # two passes an epoch
        CorpusConfig(name="plain", kind="tsv", train=str(plain), clean="none"),  # no rule: no tables
    ]
    cfg.train_src = cfg.train_tgt = None
    data = prepare_data(cfg)
    learnings.clear()
    batches = StreamingBatches(plan_corpus(cfg), data.tokenizers, batch_tokens=4096, seed=1, max_positions=256)
    epochs = streamed_epochs(batches, 2)
    assert learnings == ["made"]  # before the fix: once a pass, five times (the 3rd epoch opens)
    made = Counter({row: 2 for row in encoded(data.tokenizers, cfg, [pair for pair in pairs if pair in kept])})
    lines = [tuple(line.split("\t")) for line in plain.read_text().splitlines()]
    assert epochs == [made + Counter(encoded(data.tokenizers, cfg, lines))] * 2


# ---- a fresh streamed run: the cache's build reads the tokenizer's head, training reads every pass;
# the tables are learnt by the first of them and handed to the other ------------------------------------


def test_a_fresh_streamed_corpus_learns_the_tables_once_for_the_head_and_training(tmp_path: Path, learnings) -> None:
    cfg, pairs, kept = aligned_corpus(tmp_path, streaming=True, stream_buffer_pairs=128)
    learnings.clear()
    data = prepare_data(cfg)  # an empty cache: its build reads and cleans the head the tokenizer learns from
    batches = StreamingBatches(data.plan, data.tokenizers, batch_tokens=4096, seed=1, max_positions=256)
    epochs = streamed_epochs(batches, 2)
    # Before the fix: twice (the build's head, then training's first pass).
    assert learnings == ["train"]
    assert data.cleaning["streams"]["train"]["dropped"] == {"alignment": len(pairs) - len(kept)}
    expected = Counter(encoded(data.tokenizers, cfg, [pair for pair in pairs if pair in kept]))
    assert epochs == [expected] * 2


def test_fresh_streamed_corpora_learn_each_corpus_s_tables_once_for_the_head_and_training(
    tmp_path: Path, learnings
) -> None:
    cfg, pairs, kept = aligned_corpus(tmp_path, streaming=True, stream_buffer_pairs=128)
    tsv = tmp_path / "made.tsv"
    tsv.write_text("".join(f"{src}\t{tgt}\n" for src, tgt in pairs))
    cfg.corpora = [CorpusConfig(name="made", kind="tsv", train=str(tsv), weight=2.0)]
    cfg.train_src = cfg.train_tgt = None
    learnings.clear()
    data = prepare_data(cfg)
    batches = StreamingBatches(data.plan, data.tokenizers, batch_tokens=4096, seed=1, max_positions=256)
    epochs = streamed_epochs(batches, 2)
    assert learnings == ["made"]  # before the fix: the head's, then training's
    made = Counter({row: 2 for row in encoded(data.tokenizers, cfg, [pair for pair in pairs if pair in kept])})
    assert epochs == [made] * 2


def test_a_streamed_run_learns_the_tables_once_from_an_empty_cache_and_once_from_its_cache(
    tmp_path: Path, learnings
) -> None:
    cfg, _, _ = aligned_corpus(tmp_path)
    overrides = [
        *TINY_TRAIN,
        "data=parallel_files",
        *(f"data.{key}='{getattr(cfg, key)}'" for key in ("train_src", "train_tgt", "valid_src", "valid_tgt")),
        "data.vocab_size=300",
        "data.clean=[alignment]",
        "data.streaming=true",
        "data.stream_buffer_pairs=128",
        f"data.cache_dir='{tmp_path / 'cache'}'",
        "max_steps=4",
        "valid_every=1000",
        "save_every=1000",
    ]
    for run in ("fresh", "cached"):
        learnings.clear()
        assert train(compose_config("train", overrides), tmp_path / run)["step"] == 4
        assert learnings == ["train"], run  # before the fix the fresh run learnt them twice
