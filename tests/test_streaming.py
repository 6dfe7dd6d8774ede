"""data.streaming=true: the training files are read and tokenized a buffer at a time while training."""

from __future__ import annotations

import json
import logging
import random
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.cli.train import train
from seq2seq.config import CorpusConfig, DataConfig, UserError
from seq2seq.data.batching import Batch, EpochBatches
from seq2seq.data.corpus_plan import plan_corpus
from seq2seq.data.pipeline import StreamingStats, cache_key, prepare_data
from seq2seq.data.streaming import StreamingBatches
from seq2seq.data.tokenizer import EOS_ID

PAIRS = 53
BUFFER = 8  # 7 buffers, the last one short


def write_corpus(directory: Path) -> DataConfig:
    rng = random.Random(0)
    words = ["the", "a", "dog", "cat", "runs", "sits", "on", "mat", "red", "big"]
    sources = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))) for _ in range(PAIRS)]
    sources[10] = " ".join(["dog"] * 60)  # longer than max_tokens: dropped as it streams by
    files = {}
    for split, lines in {"train": sources, "valid": sources[:5]}.items():
        for side, text in (("src", lines), ("tgt", [s.upper() for s in lines])):
            path = directory / f"{split}.{side}"
            path.write_text("\n".join(text) + "\n")
            files[f"{split}_{side}"] = str(path)
    return DataConfig(
        kind="parallel_files",
        **files,
        vocab_size=300,
        max_tokens=40,
        streaming=True,
        stream_buffer_pairs=BUFFER,
        cache_dir=str(directory / "cache"),
    )


def rows(batch: Batch) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (source ids, target ids) of each sentence in a batch, read back from the padded tensors."""

    def until_eos(row: torch.Tensor) -> tuple[int, ...]:
        ids = row.tolist()
        return tuple(ids[: ids.index(EOS_ID)])

    return [(until_eos(s), until_eos(t)) for s, t in zip(batch.src, batch.tgt_out, strict=True)]


def expected_pairs(cfg: DataConfig, tokenizers) -> Counter:
    """Every training pair that passes the length filter, tokenized here in one go."""
    sources = Path(cfg.train_src).read_text().splitlines()
    targets = Path(cfg.train_tgt).read_text().splitlines()
    pairs = zip(tokenizers.encode_src(sources), tokenizers.encode_tgt(targets), strict=True)
    return Counter((tuple(s), tuple(t)) for s, t in pairs if len(s) <= cfg.max_tokens and len(t) <= cfg.max_tokens)


def stream(cfg: DataConfig, tokenizers) -> StreamingBatches:
    return StreamingBatches(plan_corpus(cfg), tokenizers, batch_tokens=64, seed=5, max_positions=64)


def one_epoch(streams: list[StreamingBatches]) -> Counter:
    seen: Counter = Counter()
    while True:
        updates = [s.next_update(len(streams), rank, 1) for rank, s in enumerate(streams)]
        if streams[0].epoch == 2:
            return seen
        seen.update(row for update in updates for batch in update for row in rows(batch))


@pytest.fixture()
def prepared(tmp_path: Path):
    cfg = write_corpus(tmp_path)
    return cfg, prepare_data(cfg)


def test_streaming_prepares_only_the_tokenizer_and_validation(prepared) -> None:
    cfg, data = prepared
    assert data.train is None
    assert data.stats == StreamingStats(tokenizer_pairs=PAIRS)
    # The file keeps the layout of caches written before the stats were a dataclass: those still load.
    saved = json.loads((Path(cfg.cache_dir) / cache_key(cfg) / "stats.json").read_text())
    assert saved == {"streaming": True, "tokenizer_pairs": PAIRS}
    assert len(data.valid) == 5


def test_an_epoch_streams_every_kept_pair_once(prepared) -> None:
    cfg, data = prepared
    batches = stream(cfg, data.tokenizers)
    expected = expected_pairs(cfg, data.tokenizers)
    assert sum(expected.values()) == PAIRS - 1  # the long one is filtered
    assert one_epoch([batches]) == expected
    assert batches.dropped == 1


def test_two_ranks_share_an_epoch_without_overlap(prepared) -> None:
    cfg, data = prepared
    ranks = [stream(cfg, data.tokenizers), stream(cfg, data.tokenizers)]
    seen = one_epoch(ranks)
    expected = expected_pairs(cfg, data.tokenizers)
    # Each update takes a pair of batches; a buffer with an odd count leaves one batch out, never doubles one.
    assert all(seen[pair] <= expected[pair] for pair in seen) and set(seen) <= set(expected)
    assert sum(seen.values()) >= 0.7 * sum(expected.values())


def test_resumed_stream_continues_with_the_same_batches(prepared) -> None:
    cfg, data = prepared
    original = stream(cfg, data.tokenizers)
    for _ in range(9):  # into the second epoch's buffers
        original.next_update(1, 0, 1)
    state = original.state_dict()
    assert state["buffer"] > 0
    expected = [rows(b) for _ in range(12) for b in original.next_update(1, 0, 1)]
    resumed = stream(cfg, data.tokenizers)
    resumed.load_state_dict(state)
    assert [rows(b) for _ in range(12) for b in resumed.next_update(1, 0, 1)] == expected


def test_epochs_shuffle_differently(prepared) -> None:
    cfg, data = prepared
    batches = stream(cfg, data.tokenizers)
    epochs: dict[int, list] = {1: [], 2: [], 3: []}
    while batches.epoch < 3:
        update = batches.next_update(1, 0, 1)  # taken in the epoch the stream is in afterwards
        epochs[batches.epoch].append(rows(update[0]))
    assert epochs[1] != epochs[2][:-1]
    assert sorted(map(sorted, epochs[1])) == sorted(map(sorted, epochs[2][: len(epochs[1])]))


def test_checkpoints_of_the_two_modes_do_not_mix(prepared) -> None:
    cfg, data = prepared
    state = stream(cfg, data.tokenizers).state_dict()
    with pytest.raises(UserError, match="data.streaming=true; resume with it"):
        EpochBatches.__new__(EpochBatches).load_state_dict(state)
    # The other way round was a bare ValueError (a traceback instead of the one-line message).
    epoch_state = {"epoch": 1, "position": 0, "seed": 5, "batch_tokens": 64}
    with pytest.raises(
        UserError, match=r"^this checkpoint was not trained with data.streaming=true; resume without it$"
    ):
        stream(cfg, data.tokenizers).load_state_dict(epoch_state)


@pytest.mark.parametrize(("key", "value"), [("batch_tokens", 128), ("seed", 6)])
def test_a_resumed_stream_refuses_another_batch_tokens_or_seed(prepared, key: str, value: int) -> None:
    """Regression: the saved batch_tokens was ignored, so the position pointed into other batches."""
    cfg, data = prepared
    state = stream(cfg, data.tokenizers).state_dict()
    changed = {"batch_tokens": 64, "seed": 5, key: value}
    corpus = plan_corpus(cfg)
    resumed = StreamingBatches(corpus, data.tokenizers, changed["batch_tokens"], changed["seed"], max_positions=64)
    with pytest.raises(UserError, match=rf"^resume: {key}={value} differs from the checkpoint's {key}={state[key]},"):
        resumed.load_state_dict(state)


def test_training_streams_end_to_end(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    cfg = compose_config("train", [*TINY_TRAIN, "data.streaming=true", "data.stream_buffer_pairs=150"])
    summary = train(cfg, tmp_path)
    assert summary["step"] == 8
    assert (
        "data: streamed from the corpus files, 150 pairs at a time (tokenizer learnt from the first 400)" in caplog.text
    )
    state = load_checkpoint(tmp_path / "checkpoints" / "last.pt")["data"]
    assert state["epoch"] == 1 and state["buffer"] >= 1  # 8 updates of 512 tokens go past the first buffer


def test_epochs_done_counts_the_epoch_at_its_last_update(prepared) -> None:
    """max_epochs stops on this: it must see the end of the corpus before the next epoch is started."""
    cfg, data = prepared
    batches = stream(cfg, data.tokenizers)
    seen: Counter = Counter()
    while batches.epochs_done(1, 1) < 1:
        seen.update(row for batch in batches.next_update(1, 0, 1) for row in rows(batch))
    assert batches.epoch == 1
    assert seen == expected_pairs(cfg, data.tokenizers)
    assert batches.epochs_done(1, 1) == 1  # asking again does not lose the peeked line
    batches.next_update(1, 0, 1)
    assert (batches.epoch, batches.epochs_done(1, 1)) == (2, 1)


def test_a_cleaned_stream_drops_the_duplicates_each_epoch_and_resumes_alike(tmp_path: Path) -> None:
    cfg = write_corpus(tmp_path)
    cfg.clean = ["duplicate"]
    data = prepare_data(cfg)
    sources = Path(cfg.train_src).read_text().splitlines()
    targets = Path(cfg.train_tgt).read_text().splitlines()
    firsts = list(dict.fromkeys(zip(sources, targets, strict=True)))  # each distinct pair once, in order
    assert len(firsts) < PAIRS  # the corpus repeats some short pairs
    encoded = data.tokenizers.encode_src([s for s, _ in firsts]), data.tokenizers.encode_tgt([t for _, t in firsts])
    kept = zip(*encoded, strict=True)
    expected = Counter((tuple(s), tuple(t)) for s, t in kept if len(s) <= cfg.max_tokens and len(t) <= cfg.max_tokens)
    batches = stream(cfg, data.tokenizers)
    assert one_epoch([batches]) == expected
    again = stream(cfg, data.tokenizers)
    again.load_state_dict({**again.state_dict(), "epoch": 2, "buffer": 0, "position": 0})
    second: Counter = Counter()
    while True:  # the next epoch alike: its hashes start afresh
        update = again.next_update(1, 0, 1)
        if again.epoch == 3:
            break
        second.update(row for batch in update for row in rows(batch))
    assert second == expected
    first = stream(cfg, data.tokenizers)
    for _ in range(4):
        first.next_update(1, 0, 1)
    resumed = stream(cfg, data.tokenizers)
    resumed.load_state_dict(first.state_dict())
    assert [rows(b) for b in resumed.next_update(1, 0, 1)] == [rows(b) for b in first.next_update(1, 0, 1)]


# ---- data.corpora streamed: weights over an epoch, the corpora interleaved, cleaning by hash ---------

WORDS = ("alpha", "beta")


def corpus_sentence(word: str, i: int) -> str:
    """A source only `word`'s corpus has (its words are word0 .. word9): a decoded row shows its corpus."""
    rng = random.Random(i * 7 + len(word))
    return " ".join(f"{word}{rng.randrange(10)}" for _ in range(3 + i % 4))


def streamed_corpora(directory: Path, *entries: tuple[str, int, float], **settings) -> DataConfig:
    """A streamed tsv run of one TSV corpus per (word, pairs, weight) entry."""
    corpora = []
    for word, n, weight in entries:
        path = directory / f"{word}.tsv"
        path.write_text("".join(f"{corpus_sentence(word, i)}\t{corpus_sentence(word.upper(), i)}\n" for i in range(n)))
        corpora.append(CorpusConfig(name=word, kind="tsv", weight=weight, train=str(path)))
    (directory / "valid.tsv").write_text("alpha1 alpha2\tALPHA1 ALPHA2\n" * 3)
    settings = {"streaming": True, "stream_buffer_pairs": 16, **settings}
    return DataConfig(
        kind="tsv",
        valid=str(directory / "valid.tsv"),
        corpora=corpora,
        vocab_size=300,
        cache_dir=str(directory / "cache"),
        **settings,
    )


def decoded(data, batch: Batch) -> list[str]:
    """Each row's source text, decoded from the padded tensors an update gets."""
    return [data.tokenizers.src.decode(ids) for ids, _ in rows(batch)]


def corpus_of(text: str) -> str:
    return next(word for word in WORDS if text.startswith(word))


def streamed_epochs(batches: StreamingBatches, data, epochs: int = 1) -> list[list[str]]:
    """The sources of every row of the first `epochs` epochs, decoded, epoch by epoch."""
    seen: list[list[str]] = [[] for _ in range(epochs)]
    while True:
        update = batches.next_update(1, 0, 1)  # taken in the epoch the stream is in afterwards
        if batches.epoch > epochs:
            return seen
        seen[batches.epoch - 1] += [text for batch in update for text in decoded(data, batch)]


def test_streamed_corpora_at_1_to_3_give_each_its_share_of_an_epoch(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 40, 1.0), ("beta", 40, 3.0))
    data = prepare_data(cfg)
    batches = stream(cfg, data.tokenizers)
    counted = Counter(corpus_of(text) for text in streamed_epochs(batches, data)[0])
    assert counted == {"alpha": 40, "beta": 120}  # independently: 40 pairs once, 40 pairs three times
    epoch, shown = batches.corpus_tally.finished
    assert epoch == 1 and shown.tolist() == [40, 120]


def test_streamed_corpora_are_interleaved_in_every_buffer(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 40, 1.0), ("beta", 40, 3.0))
    data = prepare_data(cfg)
    batches = stream(cfg, data.tokenizers)
    for _ in range(3):  # the first buffers, 16 pairs each: a quarter alpha's, not all of one corpus
        batches.next_update(1, 0, 1)
        per_corpus = np.bincount(batches.split.corpora, minlength=2)
        assert per_corpus.tolist() == [4, 12]  # 16 x 40/160 and 16 x 120/160


def test_a_streamed_fraction_is_another_subset_of_its_size_each_epoch(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 20, 1.0), ("beta", 41, 0.5))
    data = prepare_data(cfg)
    batches = stream(cfg, data.tokenizers)
    first, second = streamed_epochs(batches, data, 2)
    for epoch in (first, second):
        counted = Counter(corpus_of(text) for text in epoch)
        assert counted["alpha"] == 20 and counted["beta"] in (20, 21)  # 41 x 0.5, rounded down or up
    assert Counter(t for t in first if t.startswith("beta")) != Counter(t for t in second if t.startswith("beta"))


def test_streamed_corpora_resume_with_the_same_batches_and_counts(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 30, 1.0), ("beta", 30, 2.5))
    data = prepare_data(cfg)
    original = stream(cfg, data.tokenizers)
    for _ in range(15):
        original.next_update(1, 0, 1)
    state = original.state_dict()
    assert state["buffer"] > 1 and state["corpora"] == {"alpha": 1.0, "beta": 2.5}
    resumed = stream(cfg, data.tokenizers)
    resumed.load_state_dict(state)
    assert resumed.corpus_tally.rows.tolist() == original.corpus_tally.rows.tolist()
    expected = [rows(b) for _ in range(10) for b in original.next_update(1, 0, 1)]
    assert [rows(b) for _ in range(10) for b in resumed.next_update(1, 0, 1)] == expected
    cfg.corpora[1].weight = 3.0
    with pytest.raises(UserError, match="data.corpora's names and weights"):
        stream(cfg, data.tokenizers).load_state_dict(state)


def test_each_streamed_pass_drops_its_duplicates_by_hash(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 20, 1.0), ("beta", 20, 2.0), clean=["duplicate"])
    beta = Path(cfg.corpora[1].train)
    beta.write_text(beta.read_text() * 2)  # every pair twice: a pass keeps each once
    data = prepare_data(cfg)
    counted = Counter(streamed_epochs(stream(cfg, data.tokenizers), data)[0])
    distinct = {corpus_sentence("beta", i) for i in range(20)}
    # Independently: two passes of beta, each keeping one of the two copies of each pair.
    assert {t: n for t, n in counted.items() if t.startswith("beta")} == {t: 2 for t in distinct}


def test_a_tagged_streamed_corpus_starts_its_sources_with_the_tag(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 20, 1.0), ("beta", 20, 1.0))
    cfg.corpora[1].tag = True
    data = prepare_data(cfg)
    tag = data.tokenizers.src.token_to_id("<BT>")
    batches = stream(cfg, data.tokenizers)
    for _ in range(4):
        for batch in batches.next_update(1, 0, 1):
            for (ids, _), text in zip(rows(batch), decoded(data, batch), strict=True):
                assert (ids[0] == tag) == text.startswith("beta") and tag not in ids[1:]


def test_streaming_corpora_keeps_memory_flat(tmp_path: Path) -> None:
    """Reading an epoch of ten times the pairs costs no more memory: no corpus is held whole."""
    import tracemalloc

    from seq2seq.data.cleaning import CleaningReport
    from seq2seq.data.corpora import corpus_lines, mixed_rows

    peaks = []
    for n in (2_000, 2_000, 20_000):  # the first a warm-up: what the first pass imports and caches is not the corpus's
        folder = tmp_path / str(len(peaks))
        folder.mkdir()
        cfg = streamed_corpora(folder, ("alpha", n, 1.0), ("beta", n, 1.5))
        corpus = plan_corpus(cfg)
        lines = [corpus_lines(s) for s in corpus.streams]
        assert lines == [n, n]
        parts = (corpus.streams, cfg.clean_settings, corpus.languages, CleaningReport(), {}, lines)
        tracemalloc.start()
        count = sum(1 for _ in mixed_rows(*parts, corpus.corpus_weights, np.random.default_rng(0)))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert count == n + n * 3 // 2
    assert peaks[2] < peaks[1] + 64_000, peaks  # a whole-corpus list would take megabytes more


def test_a_rule_that_empties_a_streamed_corpus_is_refused_before_training(tmp_path: Path) -> None:
    cfg = streamed_corpora(tmp_path, ("alpha", 30, 1.0), ("beta", 10, 1.0), clean=["markup"], stream_tokenizer_pairs=8)
    Path(cfg.corpora[1].train).write_text("<b>x</b> y\tz w\n" * 10)
    with pytest.raises(
        UserError, match=r"every one of the (first )?\d+ training pairs of beta was dropped \(markup \d+\)"
    ):
        prepare_data(cfg)


def test_a_streamed_run_of_corpora_charts_each_corpus_s_rows(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, EventAccumulator

    cfg = streamed_corpora(tmp_path, ("alpha", 40, 1.0), ("beta", 40, 3.0))
    corpora = ",".join(f"{{name:{c.name},kind:tsv,train:'{c.train}',weight:{c.weight}}}" for c in cfg.corpora)
    overrides = [
        *TINY_TRAIN,
        "data=tsv",
        "data.train=null",
        f"data.valid='{cfg.valid}'",
        f"data.corpora=[{corpora}]",
        "data.streaming=true",
        "data.stream_buffer_pairs=64",
        "data.vocab_size=300",
        f"data.cache_dir='{tmp_path / 'cache'}'",
        "max_steps=null",
        "max_epochs=1",
        "valid_every=1000",
    ]
    summary, lines = train_logging(compose_config("train", overrides), tmp_path / "run")
    assert summary["reason"] == "finished max_epochs=1"
    events = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={k: 0 for k in DEFAULT_SIZE_GUIDANCE})
    events.Reload()
    # Independently: one epoch is 40 alpha rows and 3 x 40 beta rows, in TensorBoard and in the log.
    assert [events.Scalars(f"data/corpus_pairs/{name}")[-1].value for name in WORDS] == [40, 120]
    assert [events.Scalars(f"data/corpus_share/{name}")[-1].value for name in WORDS] == pytest.approx([0.25, 0.75])
    assert any(
        line.startswith("corpora shown: epoch 1") and "alpha 40 (25.0%), beta 120 (75.0%)" in line for line in lines
    )
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["data"]
    assert state["corpora"] == {"alpha": 1.0, "beta": 3.0} and sum(state["corpus_rows"]) == 160


def test_unequal_sides_of_a_streamed_corpus_are_refused_before_training(tmp_path: Path) -> None:
    # The head the tokenizer learns from ends long before the shorter side does: without counting both
    # sides first, the error would come at the end of the first epoch, mid-run.
    cfg = write_corpus(tmp_path)
    cfg.stream_tokenizer_pairs = 10
    Path(cfg.train_tgt).write_text("".join(Path(cfg.train_tgt).read_text().splitlines(keepends=True)[:-1]))
    src, tgt = re.escape(cfg.train_src), re.escape(cfg.train_tgt)
    with pytest.raises(UserError, match=rf"^{src} has {PAIRS} lines but {tgt} has {PAIRS - 1}: they must pair up"):
        prepare_data(cfg)
    corpora = streamed_corpora(tmp_path, ("alpha", 30, 1.0), stream_tokenizer_pairs=10)
    corpora.corpora.append(CorpusConfig(name="short", train_src=cfg.train_src, train_tgt=cfg.train_tgt))
    with pytest.raises(UserError, match=rf"^data.corpora\[short\]: {src} has {PAIRS} lines but {tgt} has {PAIRS - 1}"):
        prepare_data(corpora)


def test_a_streamed_corpus_whose_first_lines_are_dropped_is_not_refused_for_them(tmp_path: Path) -> None:
    """The tokenizer's head holds each corpus at its share, a few lines of a small one in a large mix:
    its first lines all dropped say nothing of the rest, which is kept."""
    cfg = streamed_corpora(
        tmp_path, ("alpha", 400, 1.0), ("beta", 40, 1.0), clean=["markup"], stream_tokenizer_pairs=20
    )
    beta = Path(cfg.corpora[1].train)
    lines = beta.read_text().splitlines(keepends=True)
    beta.write_text("<b>x</b> y\tz w\n" * 3 + "".join(lines[3:]))
    data = prepare_data(cfg)  # the head read beta's first 2 lines: both markup
    epoch = streamed_epochs(stream(cfg, data.tokenizers), data)[0]
    assert sum(text.startswith("beta") for text in epoch) == 37


def test_a_rule_that_empties_a_small_corpus_of_a_large_mix_is_refused_before_training(tmp_path: Path) -> None:
    """Where the head read only a few of a corpus's lines, its first pairs are judged on before training,
    up to corpora.CHECKED_PAIRS, so that a rule emptying it is still found before the first update."""
    from seq2seq.data import corpora

    cfg = streamed_corpora(
        tmp_path, ("alpha", 400, 1.0), ("beta", 40, 1.0), clean=["markup"], stream_tokenizer_pairs=20
    )
    Path(cfg.corpora[1].train).write_text("<b>x</b> y\tz w\n" * 40)
    assert corpora.CHECKED_PAIRS >= 40  # so the whole of beta is judged: "the 40", not "the first 40"
    with pytest.raises(UserError, match=r"every one of the 40 training pairs of beta was dropped \(markup 40\)"):
        prepare_data(cfg)


def test_a_streamed_mix_logs_each_corpus_s_lines_weight_and_share_at_the_start(tmp_path, caplog):
    """A streamed run counts no pairs before training, but it reads each corpus's lines, weight times an
    epoch: the start-up line says so, as the cached run's says its pairs. 400 lines at weight 1 and 40 at
    2.5 read 400 and 100 lines an epoch: 80% and 20%."""
    caplog.set_level("INFO")
    prepare_data(streamed_corpora(tmp_path, ("alpha", 400, 1.0), ("beta", 40, 2.5)))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("corpora (streamed")]
    assert line == (
        "corpora (streamed; lines before cleaning): "
        "alpha 400 lines x 1 = 400 an epoch (80.0%), beta 40 lines x 2.5 = 100 an epoch (20.0%)"
    )


def test_a_streamed_mix_counts_each_corpus_s_lines_once_a_run(tmp_path, monkeypatch):
    """The cache's build, the start-up line and training's interleave all need each corpus's lines;
    the plan counts them once (a crawl's count reads every byte of its file)."""
    import seq2seq.data.corpus_plan as corpus_plan

    counted = []
    real = corpus_plan.corpus_lines
    monkeypatch.setattr(corpus_plan, "corpus_lines", lambda stream: counted.append(stream.label) or real(stream))
    data = prepare_data(streamed_corpora(tmp_path, ("alpha", 40, 1.0), ("beta", 20, 2.0)))
    batches = StreamingBatches(data.plan, data.tokenizers, batch_tokens=64, seed=5, max_positions=64)
    batches.next_update(1, 0, 1)
    assert sorted(counted) == ["alpha", "beta"]
