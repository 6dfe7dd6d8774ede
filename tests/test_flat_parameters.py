"""Flat parameters (seq2seq/train/flat_parameters.py): the model sees its own tensors, the optimiser
and the clipping see one long vector, and nothing is lost or shared on the way to a checkpoint."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from seq2seq.config import ModelConfig, OptimConfig
from seq2seq.model.transformer import Transformer
from seq2seq.train.flat_parameters import FlatParameters, GradientReplaced, independent_copies
from seq2seq.train.optim import build_optimizer


def model(layers: int = 1) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=layers, decoder_layers=layers, dropout=0.0)
    return Transformer(cfg, 30, 30, pad_id=0)


def test_values_stay_and_autograd_fills_the_flat_gradient() -> None:
    net = model()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    flat = FlatParameters(net.parameters())
    (buffer,) = flat.buffers
    for name, param in net.named_parameters():
        assert torch.equal(param, before[name]), name
        assert param.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr(), name
        assert param.data_ptr() % 64 == 0, name  # aligned
    src = torch.randint(1, 30, (3, 5))
    logits = net(src, src)
    logits.float().square().mean().backward()
    logits = net(src, src)
    logits.float().square().mean().backward()  # a second backward adds to the first
    reference = model()
    for _ in range(2):
        reference(src, src).float().square().mean().backward()
    for (name, param), (_, theirs) in zip(net.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(param.grad, theirs.grad, rtol=1e-6, atol=1e-7, msg=name)
    # The gradient buffer holds exactly those gradients, zeros in between.
    assert float(buffer.grad.double().square().sum()) == pytest.approx(
        float(sum(p.grad.double().square().sum() for p in reference.parameters())), rel=1e-9
    )


def test_accumulated_gradients_are_the_backward_passes() -> None:
    """`accumulate` (the compiled update's way in, after autograd.grad) adds to what the buffer holds, as a backward does: two passes' gradients, against a separate
    model's two `.backward()` calls; the buffer's gaps between parameters stay zero. A parameter the
    loss did not reach (None) keeps its gradient."""
    net = model()
    flat = FlatParameters(net.parameters())
    add = flat.accumulate
    src = torch.randint(1, 30, (3, 5))
    for _ in range(2):
        loss = net(src, src).float().square().mean()
        add(torch.autograd.grad(loss, flat.params))
    reference = model()
    for _ in range(2):
        reference(src, src).float().square().mean().backward()
    for (name, param), (_, theirs) in zip(net.named_parameters(), reference.named_parameters(), strict=True):
        torch.testing.assert_close(param.grad, theirs.grad, rtol=1e-6, atol=1e-7, msg=name)
    buffer = flat.buffers[0].grad
    assert float(buffer.double().square().sum()) == pytest.approx(
        float(sum(p.grad.double().square().sum() for p in reference.parameters())), rel=1e-9
    )
    before = [param.grad.clone() for param in flat.params]
    add([None] * len(flat.params))
    assert all(torch.equal(param.grad, old) for param, old in zip(flat.params, before, strict=True))


def test_a_replaced_gradient_is_refused_not_silently_ignored() -> None:
    net = model()
    flat = FlatParameters(net.parameters())
    first = next(net.parameters())
    first.grad = torch.ones_like(first)  # not the buffer's view: the optimiser would never see it
    with pytest.raises(GradientReplaced, match="replaced"):
        flat.gradients()


def test_the_gradient_norm_of_millions_of_elements_is_the_exact_one() -> None:
    """One fp32 reduction over 24M elements was 0.15% off (measured on this CPU); by rows it is not."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in [2_048_000, 65_536, 256, 262_144] * 10]
    flat = FlatParameters(params)
    scales = [1e-2, 1.0, 3.0, 0.1] * 10
    for param, scale in zip(params, scales, strict=True):
        param.grad.copy_(torch.randn(param.shape) * scale)
    exact = float(sum(p.grad.double().square().sum() for p in params).sqrt())
    assert float(flat.gradient_norm()) == pytest.approx(exact, rel=1e-6)


def test_an_update_dispatches_a_fixed_handful_of_operators_however_many_parameters() -> None:
    """The point of the buffer: Adam's step and the zeroing run over it, not over each parameter
    (before: 1,289 of an update's 5,183 operator calls on the small model were per-parameter loops)."""
    counts = []
    for layers in (1, 4):
        net = model(layers)
        optimizer = build_optimizer(net.parameters(), OptimConfig(schedule="inverse_sqrt"), 16)
        for param in net.parameters():
            param.grad.normal_()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            optimizer.step(found_inf=torch.zeros(()))
            optimizer.zero_grad()
        counts.append(sum(1 for e in prof.events() if e.name.startswith("aten::")))
        assert len(list(net.parameters())) > 20 * layers
    assert counts[0] == counts[1] and counts[0] <= 20, counts


def test_a_checkpoints_tensors_own_their_storage_and_tied_weights_stay_tied() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, tie_output=True)
    net = Transformer(cfg, 30, 30, pad_id=0)
    FlatParameters(net.parameters())
    state = net.state_dict()
    saved = independent_copies(state)
    storages = {}
    for name, tensor in saved.items():
        assert torch.equal(tensor, state[name]), name
        assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), name
        storages.setdefault(tensor.untyped_storage().data_ptr(), []).append(name)
    shared_before = {}
    for name, tensor in state.items():
        shared_before.setdefault((tensor.data_ptr(), tensor.shape), []).append(name)
    groups_before = sorted(sorted(names) for names in shared_before.values())
    assert sorted(sorted(names) for names in storages.values()) == groups_before
    assert any(len(names) > 1 for names in groups_before)  # the model does tie some weights
