"""A training update issues its work and goes on: nothing is read back from the device between the
read-backs every log_every updates, so a GPU's queue never drains while the host waits for it.
Counted on a CPU with the profiler and patched conversions (scripts/step_profile.py); a GPU run of
scripts/bench_train.py adds CUDA's own count of synchronisations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, compose_config
from script_module import load_script
from torch.profiler import ProfilerActivity, profile

from seq2seq.data.batching import EpochBatches, collate
from seq2seq.data.pipeline import prepare_data
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.trainer import Trainer

step_profile = load_script("step_profile")


def test_updates_between_log_points_read_nothing_back(tmp_path):
    cfg = compose_config(
        "train", [*TINY_TRAIN, "data.task_train_size=300", "log_every=4", f"data.cache_dir={tmp_path / 'cache'}"]
    )
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")),
        tmp_path / "run",
        prepare_data(cfg.data),
        torch.device("cpu"),
        DistContext(),
    )
    for _ in range(4):  # warm-up, to the read-back at update 4
        trainer.train_step()
    with step_profile.count_conversions() as conversions, profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):  # updates 5 to 8: the read-back of all four comes after update 8
            trainer.train_step()
    syncing = [
        e.name
        for e in prof.events()
        if e.name in step_profile.SYNCING_OPS and not step_profile.inside_fused_optimizer(e)
    ]
    assert syncing == []  # no boolean mask (its size), no .item() on the way
    assert dict(conversions) == {("tolist", "cpu"): 1}  # check_updates: one transfer for four updates
    assert trainer.pending == [] and [r.step for r in trainer.read_back][-4:] == [5, 6, 7, 8]


@pytest.mark.parametrize("clip_norm", [0.0, 1e-3])
def test_clipping_is_torchs_and_dispatches_nothing_per_parameter(tmp_path, clip_norm):
    """The gradient norm is the norm of all gradients (computed here in float64), the clipped
    gradients are bitwise torch's clipping to that norm, and the host dispatches no operator per
    parameter to get them (torch's own takes a norm per parameter and moves each to the first one's
    device: one `aten::to` each)."""
    cfg = compose_config("train", [*TINY_TRAIN, f"optim.clip_norm={clip_norm}", f"data.cache_dir={tmp_path / 'cache'}"])
    trainer = Trainer(
        TrainingParts.of(cfg, torch.device("cpu")),
        tmp_path / "run",
        prepare_data(cfg.data),
        torch.device("cpu"),
        DistContext(),
    )
    batch = collate(trainer.data.train, np.arange(8), cfg.model.max_positions)
    loss, _ = trainer.objective(batch.src, batch.tgt_in, batch.tgt_out)
    loss.backward()
    params = [p for p in trainer.model.parameters() if p.grad is not None]
    reference = [p.detach().clone().requires_grad_() for p in params]
    for copy, param in zip(reference, params, strict=True):
        copy.grad = param.grad.clone()
    expected_norm = float(sum(c.grad.double().square().sum() for c in reference).sqrt())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        norm = trainer.update._unscale_and_clip()
    assert float(norm) == pytest.approx(expected_norm, rel=1e-6)
    if clip_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(reference, clip_norm, norm, foreach=True)
    for copy, param in zip(reference, params, strict=True):
        assert torch.equal(param.grad, copy.grad)
    if clip_norm > 0:  # it did clip: the clipped gradients' norm is the limit
        assert float(torch.nn.utils.get_total_norm([p.grad for p in params])) == pytest.approx(clip_norm, rel=1e-4)
    # A fixed handful of operators however many parameters there are (torch's own: one more per parameter).
    top = [e.name for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
    assert len(top) < len(params) / 4, top


def test_batches_padded_to_a_multiple_come_in_fewer_shapes_and_lose_no_token(tmp_path):
    """pad_to_multiple=8 (a GPU's default): every width a multiple of 8, the same real tokens in the
    same places, and an epoch in fewer distinct widths than unpadded."""
    cfg = compose_config("train", [*TINY_TRAIN, "data.task_train_size=2000", f"data.cache_dir={tmp_path / 'cache'}"])
    split = prepare_data(cfg.data).train
    plain = EpochBatches(split, 512, 7, 256)
    padded = EpochBatches(split, 512, 7, 256, pad_multiple=8)
    widths = {m: set() for m in (1, 8)}
    for stream, multiple in ((plain, 1), (padded, 8)):
        for indices in stream._batches:
            batch = collate(split, indices, 256, pad_multiple=multiple)
            assert batch.src.size(0) * max(batch.src.size(1), batch.tgt_in.size(1)) <= 512
            widths[multiple].add((batch.src.size(1), batch.tgt_in.size(1)))
            if multiple == 8:
                assert batch.src.size(1) % 8 == 0 and batch.tgt_in.size(1) % 8 == 0
                exact = collate(split, indices, 256)  # the same sentences unpadded: a prefix of each row
                for name in ("src", "tgt_in", "tgt_out"):
                    got, want = getattr(batch, name), getattr(exact, name)
                    assert torch.equal(got[:, : want.size(1)], want) and not got[:, want.size(1) :].any()
                flat = exact.tgt_out.flatten().numpy()
                assert np.array_equal(batch.tgt_out.flatten()[batch.tgt_positions].numpy(), flat[flat != 0])
    assert len(widths[8]) < len(widths[1])
