"""The CPU dropout: drops the requested fraction, rescales what it keeps, and is reproducible; traced
by torch.compile, it draws its mask with `randint` (which Inductor recomputes instead of storing)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from seq2seq.model.dropout import Dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drops_the_requested_fraction_and_preserves_the_mean(p: float) -> None:
    torch.manual_seed(0)
    x = torch.ones(1000, 1000)
    y = Dropout(p).train()(x)
    dropped = float((y == 0).float().mean())
    assert abs(dropped - p) < 0.003  # 1e6 draws: the standard error is below 0.0005
    kept = y[y != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1.0 / (1.0 - p)), rtol=1e-4, atol=0)
    assert abs(float(y.mean()) - 1.0) < 0.01


def test_each_half_of_a_random_draw_is_an_independent_field() -> None:
    """One 31-bit draw serves two elements (low and high 15 bits): both positions drop at the
    rate asked, independently of each other, and an odd element count works."""
    torch.manual_seed(2)
    y = Dropout(0.5).train()(torch.ones(999_999))
    first, second = (y[0:-1:2] == 0).float(), (y[1::2] == 0).float()
    assert abs(float(first.mean()) - 0.5) < 0.005 and abs(float(second.mean()) - 0.5) < 0.005
    assert abs(float((first * second).mean()) - 0.25) < 0.005  # independent: P(both) = P(one)^2
    assert y.shape == (999_999,)


def test_gradient_flows_only_through_kept_elements() -> None:
    torch.manual_seed(1)
    x = torch.randn(64, 32, requires_grad=True)
    y = Dropout(0.25).train()(x)
    y.sum().backward()
    kept = y.detach() != 0
    assert torch.all(x.grad[~kept] == 0)
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1.0 / 0.75), rtol=1e-4, atol=0)


def test_identity_in_eval_mode_and_reproducible_from_the_seed() -> None:
    x = torch.randn(8, 8)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    torch.manual_seed(3)
    first = Dropout(0.5).train()(x)
    torch.manual_seed(3)
    assert torch.equal(Dropout(0.5).train()(x), first)


def test_traced_dropout_draws_the_cheap_mask_at_the_same_rate() -> None:
    """Traced on a CPU, the mask is the cheap mask's custom operator: no `rand` (which Inductor writes
    out as fp32 and holds to the backward) and no `randint` (which it recomputes in every loop that
    reads the mask). Run through AOTAutograd (the compiler's forward and backward, no code generated),
    it drops the fraction asked and passes gradient only where it kept."""
    layer = Dropout(0.25).train()
    explained = torch._dynamo.explain(layer)(torch.ones(4, 4))
    assert explained.graph_break_count == 0
    code = explained.graphs[0].code
    assert "seq2seq.keep_mask" in code and "rand" not in code and "dropout(" not in code, code
    torch.manual_seed(4)
    x = torch.ones(1000, 1000, requires_grad=True)
    y = torch.compile(layer, backend="aot_eager", fullgraph=True)(x)
    assert abs(float((y == 0).float().mean()) - 0.25) < 0.003
    y.sum().backward()
    kept = y.detach() != 0
    assert torch.all(x.grad[~kept] == 0)
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1.0 / 0.75), rtol=1e-4, atol=0)


def test_compiled_dropout_draws_each_mask_once_and_holds_it_for_the_backward(monkeypatch) -> None:
    """Compiled by Inductor, a forward and backward through two dropouts and a layer norm (whose kernels
    loop over their rows more than once) draw two masks: the backward holds each, recomputes none.
    With `randint` in the graph the count was 0 (Inductor's own draws, recomputed in each loop of the
    forward's and the backward's kernels: the compiled update ran 0.86x eager, docs/performance.md);
    a mask recomputed for the backward would count 4. The same seed gives the eager layer's masks."""
    import seq2seq.model.dropout as module

    draws = []
    cheap = module.cheap_keep_mask
    monkeypatch.setattr(
        module, "cheap_keep_mask", lambda shape, threshold: draws.append(shape) or cheap(shape, threshold)
    )
    first, second = Dropout(0.3).train(), Dropout(0.3).train()
    norm = torch.nn.LayerNorm(16)

    def block(x: torch.Tensor) -> torch.Tensor:
        return second(norm(x + first(x)))

    x = torch.randn(8, 16, requires_grad=True)
    compiled = torch.compile(block, fullgraph=True)
    torch.manual_seed(7)
    compiled(x).sum().backward()  # compiles, then runs
    draws.clear()
    torch.manual_seed(7)
    y = compiled(x)
    y.sum().backward()
    assert draws == [torch.Size([8, 16])] * 2
    torch.manual_seed(7)
    torch.testing.assert_close(y, block(x))


def test_compiled_dropouts_of_one_tensor_draw_their_own_masks() -> None:
    # Two draws with equal arguments were merged by AOTAutograd's common-subexpression pass (it spares
    # only aten's random operators), so one tensor dropped from twice got one mask for both.
    first, second = Dropout(0.5).train(), Dropout(0.5).train()

    def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return first(x), second(x)

    x = torch.randn(64, 64, requires_grad=True)
    torch.manual_seed(3)
    a, b = torch.compile(twice, fullgraph=True)(x)
    assert not torch.equal(a == 0, b == 0)
    torch.manual_seed(3)
    eager_a, eager_b = twice(x)
    torch.testing.assert_close(a, eager_a)
    torch.testing.assert_close(b, eager_b)
