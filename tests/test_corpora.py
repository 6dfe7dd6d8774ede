"""Several training corpora per run (data.corpora): their readers, weights honoured over an epoch,
data.directions on top, bad input, and a run without the key left as it was."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRAIN, compose_config, train_logging

from seq2seq.config import CorpusConfig, DataConfig, UserError, validate_corpora
from seq2seq.data.batching import EpochBatches
from seq2seq.data.corpora import BACK_TRANSLATION_MARK
from seq2seq.data.corpus_plan import plan_corpus
from seq2seq.data.epoch_mix import showings, weighted_rows
from seq2seq.data.pipeline import cache_key, prepare_data
from seq2seq.data.tokenizer import EOS_ID

WORDS = ("alpha", "beta", "gamma")


def sentence(word: str, i: int) -> str:
    """A source only one corpus has: its words are word0 .. word9, so a decoded source shows its corpus."""
    rng = np.random.default_rng([i, len(word)])
    return " ".join(f"{word}{w}" for w in rng.integers(0, 10, size=3 + i % 4))


def write_tsv(path: Path, word: str, n: int) -> str:
    path.write_text("".join(f"{sentence(word, i)}\t{sentence(word.upper(), i)}\n" for i in range(n)))
    return str(path)


def corpora_config(tmp_path: Path, *entries: tuple[str, int, float], **settings) -> DataConfig:
    """A tsv run whose training pairs come from one TSV corpus per (word, pairs, weight) entry."""
    corpora = [
        CorpusConfig(name=word, kind="tsv", weight=weight, train=write_tsv(tmp_path / f"{word}.tsv", word, n))
        for word, n, weight in entries
    ]
    valid = write_tsv(tmp_path / "valid.tsv", "valid", 5)
    return DataConfig(
        kind="tsv", valid=valid, corpora=corpora, vocab_size=300, cache_dir=str(tmp_path / "cache"), **settings
    )


def epoch_sources(data, seed: int = 3, epoch: int = 1) -> Counter:
    """How many rows of an epoch come from each corpus, told apart by decoding each row's source."""
    stream = EpochBatches(data.train, batch_tokens=64, seed=seed, max_positions=64)
    if epoch != 1:
        stream.load_state_dict({**stream.state_dict(), "epoch": epoch, "position": 0})
    rows = [int(i) for batch in stream._batches for i in batch]
    decode = data.tokenizers.src.decode
    return Counter(next(w for w in WORDS if decode(list(data.train.src[i])).startswith(w)) for i in rows)


def test_today_s_configs_keep_their_cache_keys():
    # Computed by the code before data.corpora and data.clean existed (commit 48e7bfe): a run that sets
    # neither reads the same data from the same cache.
    assert cache_key(DataConfig()) == "4afde2b3e07e9f26"
    assert cache_key(DataConfig(kind="builtin", tokenizer="sentencepiece", vocab_size=500)) == "b2b2880068efb822"
    hub = DataConfig(kind="hub", hub_name="wmt14", hub_subset="de-en", src_lang="de", tgt_lang="en")
    assert cache_key(hub) == "a59b3d0bed160b0f"


def test_one_corpus_in_corpora_reads_the_pairs_data_train_reads(tmp_path):
    listed = corpora_config(tmp_path, ("alpha", 30, 1.0))
    plain = DataConfig(
        kind="tsv", train=str(tmp_path / "alpha.tsv"), valid=listed.valid, vocab_size=300, cache_dir=listed.cache_dir
    )
    a, b = prepare_data(listed), prepare_data(plain)
    assert len(a.train) == len(b.train) == 30
    assert [list(a.train.src[i]) for i in range(30)] == [list(b.train.src[i]) for i in range(30)]
    assert a.train.corpora.tolist() == [0] * 30 and b.train.corpora is None


def test_jsonl_and_multi30k_entries_are_read_as_their_kinds_read(tmp_path):
    records = [{"id": i, "en": sentence("gamma", i), "de": sentence("GAMMA", i)} for i in range(12)]
    (tmp_path / "memory.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    folder = tmp_path / "m30k"
    folder.mkdir()
    for split, n in (("train", 9), ("val", 2), ("test_2016_flickr", 2)):  # Multi30k's split names
        for lang, word in (("en", "beta"), ("de", "BETA")):
            (folder / f"{split}.{lang}").write_text("".join(sentence(word, i) + "\n" for i in range(n)))
    cfg = corpora_config(tmp_path, ("alpha", 10, 1.0), src_lang="en", tgt_lang="de")  # Multi30k's file names
    cfg.corpora += [
        CorpusConfig(name="memory", kind="jsonl", train=str(tmp_path / "memory.jsonl"), src_key="en", tgt_key="de"),
        CorpusConfig(name="m30k", kind="multi30k", dir=str(folder)),
    ]
    data = prepare_data(cfg)
    expected = {
        0: [(sentence("alpha", i), sentence("ALPHA", i)) for i in range(10)],
        1: [(record["en"], record["de"]) for record in records],
        2: [(sentence("beta", i), sentence("BETA", i)) for i in range(9)],
    }
    tok = data.tokenizers
    for index, pairs in expected.items():  # each corpus's rows, by its index, are its file's pairs in order
        rows = [i for i in range(len(data.train)) if data.train.corpora[i] == index]
        got = [(list(data.train.src[i]), list(data.train.tgt[i])) for i in rows]
        sources, targets = tok.encode_src([s for s, _ in pairs]), tok.encode_tgt([t for _, t in pairs])
        assert got == [(list(s), list(t)) for s, t in zip(sources, targets, strict=True)], index


def test_weights_1_to_3_give_each_corpus_its_share_of_an_epoch(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 40, 1.0), ("beta", 30, 3.0)))
    counts = epoch_sources(data)
    # Independently: 40 pairs once and 30 pairs three times.
    assert counts == {"alpha": 40, "beta": 90}
    share = counts["beta"] / sum(counts.values())
    assert abs(share - 90 / 130) < 0.01


def test_an_up_weighted_corpus_shows_each_pair_that_many_times(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 12, 1.0), ("beta", 10, 3.0)))
    stream = EpochBatches(data.train, batch_tokens=64, seed=0, max_positions=64)
    shown = Counter(int(i) for batch in stream._batches for i in batch)
    assert all(shown[i] == (3 if data.train.corpora[i] == 1 else 1) for i in range(len(data.train)))


def test_a_fractional_weight_is_a_fresh_sample_of_that_size_each_epoch(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 20, 1.0), ("beta", 40, 0.25)))
    first, second = epoch_sources(data, epoch=1), epoch_sources(data, epoch=2)
    assert first == second == {"alpha": 20, "beta": 10}
    rng = [np.random.default_rng([3, epoch]) for epoch in (1, 2)]
    picked = [set(weighted_rows(data.train.corpora, (1.0, 0.25), r).tolist()) for r in rng]
    assert picked[0] != picked[1]  # another quarter of beta each epoch


@pytest.mark.parametrize(("pairs", "weight", "expected"), [(10, 1.0, 10), (10, 3.0, 30), (10, 2.5, 25), (7, 0.5, 4)])
def test_showings_are_the_weight_times_the_pairs_rounded(pairs, weight, expected):
    assert showings(pairs, weight) == expected


def test_corpora_and_directions_weight_first_and_temperature_on_top(tmp_path):
    def both(word: str, n: int, src: str, tgt: str) -> None:
        (tmp_path / f"{word}.{src}-{tgt}.tsv").write_text(
            "".join(f"{sentence(word, i)}\t{sentence(tgt + word, i)}\n" for i in range(n))
        )

    for src, tgt, n in (("en", "de", 20), ("en", "fr", 10)):
        both("alpha", n, src, tgt)
        both("beta", n, src, tgt)
        both("valid", 3, src, tgt)
    corpora = [
        CorpusConfig(name="alpha", kind="tsv", weight=1.0, train=str(tmp_path / "alpha.{src}-{tgt}.tsv")),
        CorpusConfig(name="beta", kind="tsv", weight=2.0, train=str(tmp_path / "beta.{src}-{tgt}.tsv")),
    ]
    cfg = DataConfig(
        kind="tsv",
        directions=["en-de", "en-fr"],
        sampling_temperature=1.0,
        valid=str(tmp_path / "valid.{src}-{tgt}.tsv"),
        corpora=corpora,
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    data = prepare_data(cfg)
    stream = EpochBatches(data.train, batch_tokens=64, seed=1, max_positions=64)
    rows = np.concatenate(stream._batches)
    # Temperature 1 keeps the weighted proportions: en-de 20 + 2 x 20, en-fr 10 + 2 x 10 rows.
    assert np.bincount(data.train.directions[rows]).tolist() == [60, 30]
    assert np.bincount(data.train.corpora[rows]).tolist() == [30, 60]


def test_the_log_gives_each_corpus_s_pairs_weight_and_share(tmp_path, caplog):
    caplog.set_level("INFO")
    prepare_data(corpora_config(tmp_path, ("alpha", 40, 1.0), ("beta", 30, 3.0)))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("corpora:"))
    assert "alpha 40 pairs x 1 = 40 an epoch (30.8%)" in line
    assert "beta 30 pairs x 3 = 90 an epoch (69.2%)" in line


def test_resuming_with_other_weights_is_refused(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 10, 1.0), ("beta", 10, 3.0)))
    state = EpochBatches(data.train, batch_tokens=64, seed=1, max_positions=64).state_dict()
    data.train.corpus_weights = (1.0, 2.0)
    with pytest.raises(UserError, match="data.corpora's names and weights"):
        EpochBatches(data.train, batch_tokens=64, seed=1, max_positions=64).load_state_dict(state)


# ---- bad input: one line naming the key or the file ---------------------------------------------


@pytest.mark.parametrize("weight", [0.0, -1.0, float("inf")])
def test_a_weight_that_is_not_positive_names_the_entry(tmp_path, weight):
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0), ("beta", 5, weight))
    with pytest.raises(UserError, match=r"data.corpora\[1\].weight"):
        validate_corpora(cfg)


def test_a_missing_corpus_file_names_the_corpus_and_the_file(tmp_path):
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0))
    cfg.corpora.append(CorpusConfig(name="crawl", kind="tsv", train=str(tmp_path / "nowhere.tsv")))
    with pytest.raises(UserError, match=r"data.corpora\[crawl\]: .*nowhere.tsv: no such file"):
        prepare_data(cfg)


def test_unequal_sides_name_both_files(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.de").write_text("eins\n")
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0))
    cfg.corpora.append(CorpusConfig(name="short", train_src=str(tmp_path / "a.en"), train_tgt=str(tmp_path / "a.de")))
    with pytest.raises(UserError, match=r"data.corpora\[short\]: .*a.en has 2 lines but .*a.de has 1"):
        prepare_data(cfg)


def test_data_train_beside_corpora_is_refused(tmp_path):
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0))
    cfg.train = cfg.corpora[0].train
    with pytest.raises(UserError, match="data.train=.*data.corpora lists the training pairs"):
        validate_corpora(cfg)


def test_repeated_or_missing_names_and_missing_files_are_refused(tmp_path):
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0), ("beta", 5, 1.0))
    cfg.corpora[1].name = "alpha"
    with pytest.raises(UserError, match=r"data.corpora\[1\].name='alpha': names must be unique"):
        validate_corpora(cfg)
    cfg.corpora[1] = CorpusConfig(name="files", kind="parallel_files", train_src="x")
    with pytest.raises(UserError, match=r"data.corpora\[1\].train_tgt=None: kind=parallel_files needs it"):
        validate_corpora(cfg)


def test_hydra_composes_corpora_from_the_command_line(tmp_path):
    from hydra import compose, initialize_config_dir

    from seq2seq.config import register_configs, validate_train

    register_configs()
    configs = Path(__file__).resolve().parents[1] / "configs"
    overrides = [
        "data=tsv",
        "data.train=null",
        f"data.valid={write_tsv(tmp_path / 'v.tsv', 'valid', 3)}",
        "data.corpora=[{name:a,kind:tsv,train:a.tsv,weight:2}]",
    ]
    with initialize_config_dir(config_dir=str(configs), version_base=None):
        cfg = compose(config_name="train", overrides=overrides)
    validate_train(cfg)
    assert cfg.data.corpora[0].weight == 2.0 and cfg.data.corpora[0].src_key == "src"


# ---- a tagged (back-translated) corpus -----------------------------------------------------------


@pytest.mark.parametrize("tokenizer", ["bpe", "sentencepiece"])
def test_a_tagged_corpus_s_sources_start_with_the_tag_that_no_text_gives(tmp_path, tokenizer):
    cfg = corpora_config(tmp_path, ("alpha", 20, 1.0), ("beta", 20, 2.0), tokenizer=tokenizer)
    cfg.corpora[1].tag = True
    (tmp_path / "valid.tsv").write_text("<BT> valid0 valid1\tVALID0\n" * 3)  # a literal tag is text
    data = prepare_data(cfg)
    tag = data.tokenizers.src.token_to_id("<BT>")
    assert tag is not None
    decode = data.tokenizers.src.decode
    for i in range(len(data.train)):
        ids = list(data.train.src[i])
        beta = decode([i for i in ids if i != tag]).startswith("beta")
        assert (ids[0] == tag) == beta and tag not in ids[1:]
    assert all(tag not in list(data.valid.src[i]) for i in range(len(data.valid)))
    assert tag not in data.tokenizers.encode_src(["<BT> alpha1 beta2"])[0]  # what translation encodes


def test_untagged_corpora_add_no_token_to_the_vocabulary(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 20, 1.0)))
    assert data.tokenizers.src.token_to_id("<BT>") is None


# ---- the mix counted in the batches the stream hands out, and shown in the log and TensorBoard -------


def corpora_of(data, batch) -> list[str]:
    """Each row's corpus, told apart by the words its source decodes to (read back from the padded
    tensors a training update gets, not from the stream's own bookkeeping)."""
    found = []
    for row in batch.src.tolist():
        text = data.tokenizers.src.decode(row[: row.index(EOS_ID)])
        found.append(next(word for word in WORDS if text.startswith(word)))
    return found


def test_weights_1_to_3_counted_in_the_batches_of_an_epoch(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 50, 1.0), ("beta", 50, 3.0)))
    stream = EpochBatches(data.train, batch_tokens=64, seed=3, max_positions=64)
    counted: Counter = Counter()
    while True:
        update = stream.next_update(1, 0, 1)
        if stream.epoch == 2:
            break
        counted.update(corpus for batch in update for corpus in corpora_of(data, batch))
    # Independently: 50 pairs once and 50 pairs three times, a quarter and three quarters.
    assert counted == {"alpha": 50, "beta": 150}
    assert abs(counted["beta"] / sum(counted.values()) - 0.75) < 0.01
    epoch, rows = stream.corpus_tally.finished
    assert epoch == 1 and dict(zip(("alpha", "beta"), rows.tolist(), strict=True)) == counted


def test_the_tally_counts_every_rank_s_rows_and_is_recounted_on_resume(tmp_path):
    data = prepare_data(corpora_config(tmp_path, ("alpha", 30, 1.0), ("beta", 30, 3.0)))
    ranks = [EpochBatches(data.train, batch_tokens=64, seed=1, max_positions=64) for _ in range(2)]
    counted: Counter = Counter()
    for _ in range(4):
        for rank, stream in enumerate(ranks):
            counted.update(corpus for batch in stream.next_update(2, rank, 1) for corpus in corpora_of(data, batch))
    assert ranks[0].epoch == 1
    for stream in ranks:  # either rank's tally is both ranks' rows
        assert dict(zip(("alpha", "beta"), stream.corpus_tally.rows.tolist(), strict=True)) == counted
    resumed = EpochBatches(data.train, batch_tokens=64, seed=1, max_positions=64)
    resumed.load_state_dict(ranks[0].state_dict())
    assert resumed.corpus_tally.rows.tolist() == ranks[0].corpus_tally.rows.tolist()


def test_a_run_logs_and_charts_each_corpus_s_rows_of_the_epoch(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, EventAccumulator

    alpha, beta = write_tsv(tmp_path / "alpha.tsv", "alpha", 40), write_tsv(tmp_path / "beta.tsv", "beta", 40)
    corpora = f"[{{name:alpha,kind:tsv,train:'{alpha}',weight:1}},{{name:beta,kind:tsv,train:'{beta}',weight:3}}]"
    overrides = [
        *TINY_TRAIN,
        "data=tsv",
        "data.train=null",
        f"data.valid='{write_tsv(tmp_path / 'valid.tsv', 'alpha', 4)}'",
        f"data.corpora={corpora}",
        "data.vocab_size=300",
        f"data.cache_dir='{tmp_path / 'cache'}'",
        "max_steps=null",
        "max_epochs=1",
        "log_every=1",
        "valid_every=1000",
    ]
    summary, lines = train_logging(compose_config("train", overrides), tmp_path / "run")
    assert summary["reason"] == "finished max_epochs=1"
    events = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={k: 0 for k in DEFAULT_SIZE_GUIDANCE})
    events.Reload()
    last = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"] if tag.startswith("data/")}
    # Independently: one epoch is 40 alpha rows and 3 x 40 beta rows.
    assert last["data/corpus_pairs/alpha"] == 40 and last["data/corpus_pairs/beta"] == 120
    assert abs(last["data/corpus_share/beta"] - 0.75) < 0.01 and abs(last["data/corpus_share/alpha"] - 0.25) < 0.01
    assert any(
        line.startswith("corpora shown: epoch 1, to update") and "alpha 40 (25.0%), beta 120 (75.0%)" in line
        for line in lines
    )


def test_back_translated_pairs_read_the_wrong_way_or_for_other_languages_are_refused(tmp_path):
    bt = tmp_path / "bt"
    bt.mkdir()
    (bt / "train.en").write_text("a translation\n")
    (bt / "train.de").write_text("ein echter Satz\n")
    (bt / BACK_TRANSLATION_MARK).write_text(json.dumps({"key": "k", "src": "en", "tgt": "de"}))  # as the script writes

    def run(src_lang: str, tgt_lang: str, src: str, tgt: str) -> None:
        cfg = corpora_config(tmp_path, ("alpha", 5, 1.0), src_lang=src_lang, tgt_lang=tgt_lang)
        cfg.corpora.append(CorpusConfig(name="bt", train_src=str(bt / src), train_tgt=str(bt / tgt), tag=True))
        prepare_data(cfg)

    run("en", "de", "train.en", "train.de")  # as made
    with pytest.raises(UserError, match=r"^data.corpora\[bt\]: reads .*bt the wrong way round: train.en holds"):
        run("en", "de", "train.de", "train.en")
    with pytest.raises(
        UserError, match=r"^data.corpora\[bt\]: .*bt holds back-translations into en of de text .*fr-de"
    ):
        run("fr", "de", "train.en", "train.de")


def test_back_translated_pairs_read_the_wrong_way_are_refused_by_the_plan(tmp_path):
    """The run's corpus plan refuses them, before it hashes a file (the data preparation did, after the
    run had been planned and its directory locked)."""
    bt = tmp_path / "bt"
    bt.mkdir()
    (bt / "train.en").write_text("a translation\n")
    (bt / "train.de").write_text("ein echter Satz\n")
    (bt / BACK_TRANSLATION_MARK).write_text(json.dumps({"key": "k", "src": "en", "tgt": "de"}))
    cfg = corpora_config(tmp_path, ("alpha", 5, 1.0), src_lang="en", tgt_lang="de")
    cfg.corpora.append(CorpusConfig(name="bt", train_src=str(bt / "train.de"), train_tgt=str(bt / "train.en")))
    with pytest.raises(UserError, match=r"^data.corpora\[bt\]: reads .*bt the wrong way round: train.en holds"):
        plan_corpus(cfg)
