"""The fixed-chunk projection + label-smoothed loss that compiled code takes (`seq2seq.train.compiled_loss`)
against F.cross_entropy on the full logits, eagerly and traced; and one graph for every row count."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from numerics import assert_close

from seq2seq.train import compiled_loss
from seq2seq.train.compiled_loss import LOSS_CHUNKS, chunked_smoothed_loss

VOCAB, WIDTH, SMOOTHING = 37, 8, 0.1


def rows_of(count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden (count, WIDTH), weight (VOCAB, WIDTH), target (count,), a fixed output bias (VOCAB,)."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(count, WIDTH, generator=generator)
    weight = torch.randn(VOCAB, WIDTH, generator=generator) / 2
    target = torch.randint(0, VOCAB, (count,), generator=generator)
    return hidden, weight, target, torch.randn(VOCAB, generator=generator)


def reference(hidden, weight, target, bias, scale: float) -> tuple[torch.Tensor, ...]:
    """Loss, NLL and the gradients of scale x loss, from torch's cross-entropy on the whole logits."""
    hidden, weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    logits = hidden @ weight.t() + (0 if bias is None else bias)
    loss = F.cross_entropy(logits, target, label_smoothing=SMOOTHING, reduction="sum")
    nll = F.cross_entropy(logits.detach(), target, reduction="sum")
    (loss * scale).backward()
    return loss.detach(), nll, hidden.grad, weight.grad


def ours(hidden, weight, target, bias, scale: float) -> tuple[torch.Tensor, ...]:
    hidden, weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    loss, nll = chunked_smoothed_loss(hidden, weight, target, SMOOTHING, torch.float32, bias)
    (loss * scale).backward()
    return loss.detach(), nll, hidden.grad, weight.grad


def assert_all_close(actual: tuple, expected: tuple) -> None:
    for name, mine, theirs in zip(("loss", "nll", "d hidden", "d weight"), actual, expected, strict=True):
        assert_close(mine, theirs, name, atol=1e-5, rtol=1e-5)


# fewer rows than chunks, as many, a multiple, and counts that leave the last chunk part repeated rows
@pytest.mark.parametrize("count", [1, 3, LOSS_CHUNKS, 2 * LOSS_CHUNKS, 2 * LOSS_CHUNKS + 1, 50])
@pytest.mark.parametrize("with_bias", [False, True])
def test_chunked_loss_matches_cross_entropy_on_the_whole_logits(count: int, with_bias: bool) -> None:
    """Loss, NLL and the gradients (scaled, as the update scales the loss) of hidden and weight."""
    hidden, weight, target, bias = rows_of(count)
    bias = bias if with_bias else None
    assert_all_close(ours(hidden, weight, target, bias, 0.37), reference(hidden, weight, target, bias, 0.37))


def test_without_gradients_the_same_loss() -> None:
    hidden, weight, target, bias = rows_of(11, seed=1)
    with torch.no_grad():
        loss, nll = chunked_smoothed_loss(hidden, weight, target, SMOOTHING, torch.float32, bias)
    expected = reference(hidden, weight, target, bias, 1.0)
    assert_close(loss, expected[0], "loss", atol=1e-5, rtol=1e-5)
    assert_close(nll, expected[1], "nll", atol=1e-5, rtol=1e-5)


def loss_and_gradients(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What compile=true traces of the loss: the loss, then autograd.grad of it in the same graph."""
    loss, nll = chunked_smoothed_loss(hidden, weight, target, SMOOTHING, torch.float32)
    grad_hidden, grad_weight = torch.autograd.grad(loss, (hidden, weight))
    return loss.detach(), nll, grad_hidden, grad_weight


def leaves(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden, weight, target, _ = rows_of(count, seed)
    return hidden.requires_grad_(), weight.requires_grad_(), target


def test_traced_with_its_backward_it_is_one_graph_without_breaks() -> None:
    """The autograd.Function and its backward inside TorchDynamo's graph: no break (an opaque function
    or a loop over the batch's rows would be one)."""
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        explained = torch._dynamo.explain(loss_and_gradients)(*leaves(10, 0))
    assert explained.graph_break_count == 0, [reason.reason for reason in explained.break_reasons]
    assert explained.graph_count == 1


def test_one_graph_serves_every_row_count() -> None:
    """Compiled through AOTAutograd (whose shape guards are added to TorchDynamo's), with the row count
    dynamic as compile=true marks it: rows of many counts, every chunk remainder, one graph, and each
    result the cross-entropy's."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(loss_and_gradients, backend="aot_eager")
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        for seed, count in enumerate([23, 9, 2, 40, 5, 7, 64, 3, 17]):
            hidden, weight, target = leaves(count, seed)
            torch._dynamo.maybe_mark_dynamic(hidden, 0)
            torch._dynamo.maybe_mark_dynamic(target, 0)
            assert_all_close(compiled(hidden, weight, target), reference(hidden, weight, target, None, 1.0))
    assert counters["stats"]["unique_graphs"] == 1


def test_the_chunk_count_is_a_constant_whatever_the_rows(monkeypatch) -> None:
    """The logits are made LOSS_CHUNKS pieces at a time, ceil(N / LOSS_CHUNKS) + 1 rows each, for any N:
    counted by the matrix products the forward makes (three a chunk with gradients, one without)."""
    products = []
    original = torch.Tensor.__matmul__

    def counting(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
        products.append(tuple(self.shape))
        return original(self, other)

    monkeypatch.setattr(torch.Tensor, "__matmul__", counting)
    for count in (3, 50, 1000):
        products.clear()
        with torch.no_grad():
            chunked_smoothed_loss(*rows_of(count)[:3], SMOOTHING, torch.float32)
        assert products == [(-(-count // LOSS_CHUNKS) + 1, WIDTH)] * LOSS_CHUNKS
    products.clear()
    ours(*rows_of(50)[:3], None, 1.0)
    assert len(products) == 3 * compiled_loss.LOSS_CHUNKS


def test_each_chunk_waits_for_the_loss_terms_of_the_one_before() -> None:
    """Chunk k + 1's logits product depends on chunk k's loss terms (the target's gather and the
    mean over the vocabulary), not only on its gradient: otherwise the compiler may leave every
    chunk's terms to one kernel after the last chunk, which holds all their logits at once (it did,
    in the compiled update: three chunks' logits, 84 MB of small's peak). Read off the traced graph."""
    from torch.fx.experimental.proxy_tensor import make_fx

    hidden, weight, target, _ = rows_of(50)
    graph = make_fx(
        lambda h, w, t: compiled_loss._chunked(h, w, t, SMOOTHING, torch.float32, None, with_gradients=True)
    )(hidden, weight, target).graph
    per_chunk = -(-50 // LOSS_CHUNKS) + 1

    def ancestors(node: torch.fx.Node) -> set[torch.fx.Node]:
        seen, stack = set(), list(node.all_input_nodes)
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(n.all_input_nodes)
        return seen

    def calls(op: object) -> list[torch.fx.Node]:
        return [n for n in graph.nodes if n.target is op]

    logits = [n for n in calls(torch.ops.aten.mm.default) if tuple(n.meta["val"].shape) == (per_chunk, VOCAB)]
    gathers, means = calls(torch.ops.aten.gather.default), calls(torch.ops.aten.mean.dim)
    assert len(logits) == len(gathers) == len(means) == LOSS_CHUNKS
    for chunk in range(LOSS_CHUNKS - 1):
        before_next = ancestors(logits[chunk + 1])
        assert gathers[chunk] in before_next and means[chunk] in before_next, chunk
