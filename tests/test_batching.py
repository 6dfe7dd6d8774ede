"""Token-bucket batching (`seq2seq.data.batching`): the batches themselves, padding and shifting in
`collate`, and the resumable, rank-sharded training stream `EpochBatches`."""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
import pytest

from seq2seq.data.batching import EpochBatches, collate, make_batches
from seq2seq.data.pipeline import Split, TokenColumn, load_saved_split
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def token_column(lengths: list[int] | np.ndarray, rng: np.random.Generator) -> TokenColumn:
    """Random ordinary ids (4..49) for sentences of the given lengths, as flat values + offsets."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return TokenColumn([rng.integers(4, 50, size=int(offsets[-1])).astype(np.int32)], [offsets])


def make_split(n: int = 60, max_len: int = 12, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    return Split(
        token_column(rng.integers(1, max_len + 1, size=n), rng), token_column(rng.integers(1, max_len + 1, size=n), rng)
    )


def padded_sizes(batches: list[np.ndarray], src_len: np.ndarray, tgt_len: np.ndarray) -> list[int]:
    longest = np.maximum(src_len, tgt_len) + 2
    return [len(b) * int(longest[b].max()) for b in batches]


def random_lengths(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, 30, size=n), rng.integers(1, 30, size=n)


# ---- make_batches -------------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
def test_make_batches_uses_every_index_once(shuffle: bool) -> None:
    src_len, tgt_len = random_lengths(300, 0)
    batches = make_batches(src_len, tgt_len, 120, np.random.default_rng(1) if shuffle else None)
    assert sorted(np.concatenate(batches).tolist()) == list(range(300))


@pytest.mark.parametrize("budget", [40, 120, 500])
def test_make_batches_respect_token_budget(budget: int) -> None:
    src_len, tgt_len = random_lengths(300, 1)
    batches = make_batches(src_len, tgt_len, budget, np.random.default_rng(2))
    for batch, size in zip(batches, padded_sizes(batches, src_len, tgt_len), strict=True):
        assert size <= budget or len(batch) == 1


def test_sentence_longer_than_budget_gets_its_own_batch() -> None:
    src_len = np.array([3, 4, 50, 2, 5, 3])
    tgt_len = np.array([2, 60, 1, 3, 4, 2])  # sentences 1 and 2 exceed 40 tokens with BOS/EOS
    batches = make_batches(src_len, tgt_len, 40, np.random.default_rng(0))
    as_lists = sorted(b.tolist() for b in batches)
    assert [1] in as_lists and [2] in as_lists
    assert sorted(np.concatenate(batches).tolist()) == list(range(6))


def test_make_batches_without_rng_fill_batches_in_length_order() -> None:
    src_len, tgt_len = random_lengths(200, 2)
    budget = 150
    batches = make_batches(src_len, tgt_len, budget, None)
    longest = np.maximum(src_len, tgt_len) + 2
    order = np.concatenate(batches)
    assert np.all(np.diff(longest[order]) >= 0)
    # Greedy filling: no batch could have taken the next sentence too.
    for batch, following in zip(batches, batches[1:], strict=False):
        assert (len(batch) + 1) * longest[following[0]] > budget


def test_make_batches_group_sentences_of_one_longest_side_by_their_other_lengths() -> None:
    # 40 sentences whose longer side is 10 tokens: targets all 10, sources 2 or 9, shuffled together.
    # Ordered by the longer side alone, batches of 10 mix the two source lengths, and most of a
    # short source's width is padding; ordered by the source's length next, each batch holds one.
    rng = np.random.default_rng(7)
    src_len = rng.permutation(np.repeat([2, 9], 20))
    tgt_len = np.full(40, 10)
    batches = make_batches(src_len, tgt_len, 10 * 12, np.random.default_rng(3))
    assert [len(b) for b in batches] == [10] * 4
    padded_src = sum(len(b) * int(src_len[b].max()) for b in batches)
    assert padded_src == int(src_len.sum())  # 20 x 2 + 20 x 9: no source padding at all
    for batch in batches:
        assert len(set(src_len[batch].tolist())) == 1


def test_make_batches_deterministic_per_seed_and_shuffled_across_seeds() -> None:
    src_len, tgt_len = random_lengths(300, 3)

    def run(seed: int) -> list[list[int]]:
        return [b.tolist() for b in make_batches(src_len, tgt_len, 100, np.random.default_rng(seed))]

    assert run(5) == run(5)
    assert run(5) != run(6)
    unshuffled = [b.tolist() for b in make_batches(src_len, tgt_len, 100, None)]
    assert run(5) != unshuffled


# ---- collate ------------------------------------------------------------------------------------


def test_collate_pads_and_shifts() -> None:
    split = make_split(20, 9, seed=4)
    indices = np.array([3, 17, 0, 8])
    batch = collate(split, indices, max_positions=64)
    np.testing.assert_array_equal(batch.indices, indices)
    assert batch.src.shape == (4, max(len(split.src[i]) for i in indices) + 1)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (4, max(len(split.tgt[i]) for i in indices) + 1)
    for row, i in enumerate(indices):
        s, t = split.src[i].tolist(), split.tgt[i].tolist()
        src_row, tgt_in, tgt_out = batch.src[row].tolist(), batch.tgt_in[row].tolist(), batch.tgt_out[row].tolist()
        assert src_row == s + [EOS_ID] + [PAD_ID] * (len(src_row) - len(s) - 1)
        assert tgt_in == [BOS_ID] + t + [PAD_ID] * (len(tgt_in) - len(t) - 1)
        assert tgt_out == t + [EOS_ID] + [PAD_ID] * (len(tgt_out) - len(t) - 1)
        assert tgt_out[: len(t)] == tgt_in[1 : len(t) + 1]  # shifted left by one, EOS in the freed slot
    assert batch.src_tokens == sum(len(split.src[i]) + 1 for i in indices) == int((batch.src != PAD_ID).sum())
    assert batch.tgt_tokens == sum(len(split.tgt[i]) + 1 for i in indices) == int((batch.tgt_out != PAD_ID).sum())


def test_collate_truncates_to_max_positions() -> None:
    rng = np.random.default_rng(0)
    split = Split(token_column([9, 2], rng), token_column([3, 12], rng))
    batch = collate(split, np.array([0, 1]), max_positions=5)
    assert batch.src.shape[1] <= 5 and batch.tgt_in.shape[1] <= 5
    assert batch.src[0].tolist() == split.src[0][:4].tolist() + [EOS_ID]
    assert batch.src[1].tolist() == split.src[1].tolist() + [EOS_ID, PAD_ID, PAD_ID]
    assert batch.tgt_in[1].tolist() == [BOS_ID] + split.tgt[1][:4].tolist()
    assert batch.tgt_out[1].tolist() == split.tgt[1][:4].tolist() + [EOS_ID]
    assert batch.src_tokens == 5 + 3
    assert batch.tgt_tokens == 4 + 5


# ---- EpochBatches -------------------------------------------------------------------------------


def indices_of(batches: list) -> list[list[int]]:
    return [b.indices.tolist() for b in batches]


def updates(
    stream: EpochBatches, count: int, world_size: int = 1, rank: int = 0, accum: int = 1
) -> list[list[list[int]]]:
    return [indices_of(stream.next_update(world_size, rank, accum)) for _ in range(count)]


def test_token_column_from_table() -> None:
    src = [[5, 6, 7], [8], [9, 10]]
    column = TokenColumn.from_table(pa.table({"ids": src}), "ids")
    assert len(column) == 3
    assert column.lengths().tolist() == [3, 1, 2]
    assert [column[i].tolist() for i in range(3)] == src


def test_token_column_reads_across_record_batches_without_copying(tmp_path) -> None:
    """A saved split is many Arrow record batches; rows are found in the right one, and the token
    arrays are views of the memory-mapped file, not copies."""
    rng = np.random.default_rng(0)
    rows = [rng.integers(4, 100, size=rng.integers(1, 9)).tolist() for _ in range(2_500)]
    datasets.Dataset.from_dict({"ids": rows}).save_to_disk(str(tmp_path / "split"))
    allocated = pa.total_allocated_bytes()
    column = TokenColumn.from_table(load_saved_split(tmp_path / "split"), "ids")
    assert pa.total_allocated_bytes() == allocated  # no token was copied into Arrow's memory pool
    assert len(column.values) > 1  # written in record batches of 1,000 rows
    assert len(column) == len(rows) and column.lengths().tolist() == [len(r) for r in rows]
    assert all(column[i].tolist() == rows[i] for i in range(len(rows)))


def test_one_epoch_covers_every_sentence_once() -> None:
    split = make_split(60)
    stream = EpochBatches(split, batch_tokens=40, seed=3, max_positions=64)
    seen = [i for update in updates(stream, len(stream)) for batch in update for i in batch]
    assert sorted(seen) == list(range(len(split)))
    assert stream.epoch == 1
    stream.next_update(1, 0, 1)
    assert stream.epoch == 2


def test_epochs_are_shuffled_differently() -> None:
    stream = EpochBatches(make_split(60), batch_tokens=40, seed=3, max_positions=64)
    first = updates(stream, len(stream))
    second = updates(stream, len(stream))
    assert stream.epoch == 2
    assert first != second
    assert sorted(i for u in first for b in u for i in b) == sorted(i for u in second for b in u for i in b)


def rank_streams(split: Split, world_size: int, seed: int) -> list[EpochBatches]:
    """One stream per rank, as each DDP process builds its own."""
    return [EpochBatches(split, batch_tokens=40, seed=seed, max_positions=64) for _ in range(world_size)]


def step_ranks(streams: list[EpochBatches], accum: int) -> list[list[list[int]]]:
    """One update on every rank: each rank's micro-batch indices."""
    return [indices_of(stream.next_update(len(streams), rank, accum)) for rank, stream in enumerate(streams)]


@pytest.mark.parametrize(("world_size", "accum"), [(1, 1), (1, 3), (2, 2)])
def test_resume_mid_epoch_continues_the_same_stream(world_size: int, accum: int) -> None:
    split = make_split(60)
    reference = rank_streams(split, world_size, seed=7)
    per_update = world_size * accum
    consumed = max(1, len(reference[0]) // per_update // 2)  # stop in the middle of the first epoch
    total = 2 * (len(reference[0]) // per_update) + 2  # continue into the third epoch
    expected = [step_ranks(reference, accum) for _ in range(total)]

    interrupted = rank_streams(split, world_size, seed=7)
    got = [step_ranks(interrupted, accum) for _ in range(consumed)]
    resumed = rank_streams(split, world_size, seed=7)
    for old, new in zip(interrupted, resumed, strict=True):
        new.load_state_dict(old.state_dict())
    got += [step_ranks(resumed, accum) for _ in range(total - consumed)]
    assert resumed[0].epoch >= 2  # the comparison crossed an epoch boundary
    assert got == expected


def test_ranks_split_an_update_like_accumulation() -> None:
    split = make_split(60)
    ranks = rank_streams(split, 2, seed=11)
    single = EpochBatches(split, batch_tokens=40, seed=11, max_positions=64)
    for _ in range(len(single) // 2 + 2):  # past an epoch boundary
        rank0, rank1 = step_ranks(ranks, 1)
        accumulated = indices_of(single.next_update(1, 0, 2))
        assert len(rank0) == len(rank1) == 1
        assert not set(rank0[0]) & set(rank1[0])
        assert sorted(rank0 + rank1) == sorted(accumulated)
    assert ranks[0].epoch == ranks[1].epoch == single.epoch == 2


def test_resume_with_another_world_size_keeps_the_global_position() -> None:
    split = make_split(60)
    two_ranks = rank_streams(split, 2, seed=13)
    for _ in range(3):
        step_ranks(two_ranks, 1)  # 3 updates x 2 ranks = 6 batches consumed
    assert two_ranks[0].state_dict() == two_ranks[1].state_dict()
    resumed = EpochBatches(split, batch_tokens=40, seed=13, max_positions=64)
    resumed.load_state_dict(two_ranks[0].state_dict())

    uninterrupted = EpochBatches(split, batch_tokens=40, seed=13, max_positions=64)
    updates(uninterrupted, 6)
    assert updates(resumed, 4) == updates(uninterrupted, 4)


@pytest.mark.parametrize(("world_size", "accum"), [(1, 3), (3, 1), (2, 2)])
def test_corpus_smaller_than_an_update_still_fills_every_rank(world_size: int, accum: int) -> None:
    """With fewer batches than one update needs, batches repeat so each rank gets `accum` of them."""
    split = make_split(4, 3)
    streams = [EpochBatches(split, batch_tokens=1000, seed=0, max_positions=64) for _ in range(world_size)]
    assert len(streams[0]) == 1
    for _ in range(2):
        for per_rank in step_ranks(streams, accum):
            assert len(per_rank) == accum
            assert all(sorted(batch) == list(range(4)) for batch in per_rank)


def test_epochs_done_counts_an_epoch_when_its_last_update_is_taken() -> None:
    ranks = [EpochBatches(make_split(), batch_tokens=64, seed=0, max_positions=64) for _ in range(2)]
    seen = []
    while ranks[0].epochs_done(2, 1) < 1:
        seen += [i for rank, s in enumerate(ranks) for batch in s.next_update(2, rank, 1) for i in batch.indices]
    assert ranks[0].epoch == 1 and ranks[0].position == len(ranks[0]) // 2 * 2
    assert len(seen) == len(set(seen))  # nothing of the next epoch
    assert len(seen) == sum(len(b) for b in ranks[0]._batches[: ranks[0].position])


@pytest.mark.parametrize("epochs", [1, 2])
def test_max_epochs_trains_every_sentence_exactly_that_many_times(tmp_path, monkeypatch, epochs: int) -> None:
    """Regression: with max_epochs=1 the run took one update of the second epoch (7 updates for 6 batches)."""
    from collections import Counter

    from conftest import TINY_TRAIN, compose_config

    from seq2seq.cli.train import train

    seen: Counter = Counter()
    real = EpochBatches.next_update

    def recording(self: EpochBatches, world_size: int, rank: int, accum_steps: int) -> list:
        batches = real(self, world_size, rank, accum_steps)
        seen.update(int(i) for batch in batches for i in batch.indices)
        return batches

    monkeypatch.setattr(EpochBatches, "next_update", recording)
    overrides = [*TINY_TRAIN, "data.task_train_size=100", "batch_tokens=256", "max_steps=null", "valid_every=1000"]
    summary = train(compose_config("train", [*overrides, f"max_epochs={epochs}"]), tmp_path)
    assert summary["reason"] == f"finished max_epochs={epochs}"
    assert set(seen.values()) == {epochs} and len(seen) == 100


def test_resume_with_another_batch_tokens_is_refused_through_train(tmp_path) -> None:
    """Regression: a resumed run with batch_tokens=... on the command line used the saved position on
    other batches, silently. The message names the key and the saved value."""
    from conftest import TINY_TRAIN, compose_config

    from seq2seq.cli.train import train
    from seq2seq.config import UserError

    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2"]), tmp_path)
    resume = f"resume={tmp_path}"
    with pytest.raises(UserError, match="^resume: batch_tokens=600 differs from the checkpoint's batch_tokens=512,"):
        train(compose_config("train", [resume]), tmp_path, overrides=[resume, "batch_tokens=600", "max_steps=4"])
