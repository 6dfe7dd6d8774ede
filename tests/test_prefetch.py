"""The prefetching stream (a GPU's batches made one update ahead on a thread) gives the batches the
stream gives, in order, and reports the stream as consumed: a checkpoint taken while a batch waits
resumes at that batch."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_TRAIN, compose_config

from seq2seq.data.batching import EpochBatches
from seq2seq.data.pipeline import prepare_data
from seq2seq.data.prefetch import Prefetcher

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("prefetch-cache")
    cfg = compose_config("train", [*TINY_TRAIN, "data.task_train_size=600", f"data.cache_dir={cache}"])
    return prepare_data(cfg.data).train


def stream(split) -> EpochBatches:
    return EpochBatches(split, 512, 3, 256)


def same(a, b) -> bool:
    return all(torch.equal(getattr(a, n), getattr(b, n)) for n in ("src", "tgt_in", "tgt_out", "tgt_positions"))


def test_the_same_batches_across_epochs_and_the_consumed_state(split):
    plain, ahead = stream(split), Prefetcher(stream(split), CPU, 2, 1, 1)
    updates = len(plain) // 2 * 3  # three epochs' worth
    for _ in range(updates):
        expected = plain.next_update(2, 1, 1)
        got = ahead.next_update(2, 1, 1)
        assert len(got) == len(expected) and all(same(g, e) for g, e in zip(got, expected, strict=True))
        assert ahead.state_dict() == plain.state_dict()
        assert ahead.epoch == plain.epoch and ahead.epochs_done(2, 1) == plain.epochs_done(2, 1)
    assert plain.epoch >= 3


def test_a_resume_from_its_state_gives_the_batch_that_was_waiting(split):
    ahead = Prefetcher(stream(split), CPU, 1, 0, 1)
    for _ in range(5):
        ahead.next_update(1, 0, 1)
    saved = ahead.state_dict()  # a batch is made already: the state is before it
    waiting = ahead.next_update(1, 0, 1)
    resumed = Prefetcher(stream(split), CPU, 1, 0, 1)
    resumed.load_state_dict(saved)
    assert all(same(a, b) for a, b in zip(resumed.next_update(1, 0, 1), waiting, strict=True))
    # Reloaded while a batch waits: the waiting batch is dropped, the stream goes where it was told.
    ahead.load_state_dict(saved)
    assert all(same(a, b) for a, b in zip(ahead.next_update(1, 0, 1), waiting, strict=True))


def test_another_shape_of_update_is_refused(split):
    ahead = Prefetcher(stream(split), CPU, 1, 0, 1)
    with pytest.raises(ValueError, match="made for"):
        ahead.next_update(2, 0, 1)


def test_training_through_it_is_bitwise_the_training_without(tmp_path):
    """As the Trainer uses it on a GPU, here on the CPU: the same updates, bit for bit, and a
    checkpoint's data position that of the updates made."""
    from seq2seq.train.distributed import DistContext
    from seq2seq.train.parts import TrainingParts
    from seq2seq.train.trainer import Trainer

    cfg = compose_config("train", [*TINY_TRAIN, "data.task_train_size=300", f"data.cache_dir={tmp_path / 'cache'}"])
    data = prepare_data(cfg.data)
    trainers = []
    for name in ("plain", "ahead"):
        torch.manual_seed(0)
        trainer = Trainer(TrainingParts.of(cfg, CPU), tmp_path / name, data, CPU, DistContext())
        if name == "ahead":
            trainer.stream = Prefetcher(trainer.stream, CPU, 1, 0, cfg.accum_steps)
        for _ in range(6):
            trainer.train_step()
        trainers.append(trainer)
    plain, ahead = trainers
    assert ahead.training_state().data == plain.training_state().data
    for (name, a), b in zip(plain.model.state_dict().items(), ahead.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
