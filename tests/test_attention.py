"""The paper's attention (`seq2seq.model.attention.attention`) against softmax(Q K^T / sqrt(d)) V
written out one query and one key at a time, and the kernels that replace it
(`seq2seq.model.kernels`) against it. Multi-head attention as a whole is checked against
torch.nn.MultiheadAttention in test_model.py."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable

import pytest
import torch

from seq2seq.model import kernels
from seq2seq.model.attention import attention, split_heads, split_projection

BATCH, HEADS, DIM = 2, 3, 5
ATOL = 1e-5


def by_hand(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: Callable[[int, int, int], bool]
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax over the allowed keys of q.k / sqrt(d), then the weighted sum of values, in Python floats."""
    tq, tk = q.size(2), k.size(2)
    out = torch.zeros(BATCH, HEADS, tq, DIM)
    weights = torch.zeros(BATCH, HEADS, tq, tk)
    for b in range(BATCH):
        for h in range(HEADS):
            for i in range(tq):
                keys = [j for j in range(tk) if allowed(b, i, j)]
                scores = [sum(float(x) * float(y) for x, y in zip(q[b, h, i], k[b, h, j], strict=True)) for j in keys]
                scores = [s / math.sqrt(DIM) for s in scores]
                top = max(scores)
                exps = [math.exp(s - top) for s in scores]
                total = sum(exps)
                for j, e in zip(keys, exps, strict=True):
                    weights[b, h, i, j] = e / total
                    out[b, h, i] += (e / total) * v[b, h, j]
    return out, weights


def qkv(tq: int, tk: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return torch.randn(BATCH, HEADS, tq, DIM), torch.randn(BATCH, HEADS, tk, DIM), torch.randn(BATCH, HEADS, tk, DIM)


def padding(tk: int, lengths: list[int]) -> torch.Tensor:
    """(B, 1, 1, Tk), True = may attend: sentence b has lengths[b] real keys."""
    return (torch.arange(tk)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


@pytest.mark.parametrize(
    ("tq", "tk", "causal", "lengths"),
    [
        (4, 6, False, None),  # no mask at all
        (4, 6, False, [6, 3]),  # padding
        (5, 5, True, None),  # causal
        (5, 5, True, [5, 2]),  # causal and padding
        (2, 6, True, [6, 4]),  # two new queries after a cached prefix: causal aligned bottom-right
    ],
)
def test_attention_is_the_papers_formula(tq: int, tk: int, causal: bool, lengths: list[int] | None) -> None:
    q, k, v = qkv(tq, tk)
    mask = padding(tk, lengths) if lengths else None

    def allowed(b: int, i: int, j: int) -> bool:
        visible = j <= i + (tk - tq) if causal else True
        return visible and (lengths is None or j < lengths[b])

    expected_out, expected_weights = by_hand(q, k, v, allowed)
    out, weights = attention(q, k, v, mask, causal)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)
    torch.testing.assert_close(out, expected_out, atol=ATOL, rtol=0)


@pytest.mark.parametrize(("tq", "tk", "causal"), [(6, 6, False), (6, 6, True), (3, 6, True)])
def test_the_fused_kernel_equals_the_formula(tq: int, tk: int, causal: bool) -> None:
    q, k, v = qkv(tq, tk, seed=1)
    mask = padding(tk, [tk, 4])
    expected, _ = attention(q, k, v, mask, causal)
    torch.testing.assert_close(kernels.fused_attention(q, k, v, mask, causal, 0.0), expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("grad", [False, True])  # decoding (matmul path) and training (fused kernel)
def test_attend_answers_a_sentences_beams_together(grad: bool) -> None:
    """g query rows per key row (beam search) give what each row gets against its own copy of the keys."""
    group = 3
    torch.manual_seed(2)
    q = torch.randn(BATCH * group, HEADS, 1, DIM)
    k, v = torch.randn(BATCH, HEADS, 7, DIM), torch.randn(BATCH, HEADS, 7, DIM)
    mask = padding(7, [7, 4])
    with torch.set_grad_enabled(grad):
        out, weights = kernels.attend(q, k, v, mask, False, 0.0, need_weights=True, exact=attention)
        plain, _ = kernels.attend(q, k, v, mask, False, 0.0, need_weights=False, exact=attention)
    repeated = [t.repeat_interleave(group, dim=0) for t in (k, v, mask)]
    expected_out, expected_weights = attention(q, *repeated)
    torch.testing.assert_close(out, expected_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(plain, expected_out, atol=ATOL, rtol=0)
    assert weights is not None
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)


def test_decoding_precision_is_fp32_for_a_half_precision_model_on_a_cpu() -> None:
    x = torch.randn(2, 3)
    q = torch.randn(2, 3)
    assert kernels.decoding_precision(x.bfloat16(), q.bfloat16())[0].dtype == torch.float32
    (same,) = kernels.decoding_precision(x, q)
    assert same is q  # an fp32 model is left as it is


def test_on_cuda_sdpa_may_not_choose_cudnn(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN's attention builds a plan per shape (~25 ms of CPU per call on an H100: 0.41 s an update
    of the small model); on CUDA the fused path allows flash, memory-efficient and math kernels only,
    and only for its own call. The CUDA tensor is faked: what is checked is the backend flags in force
    when SDPA is called (tests/test_cuda.py checks the kernel that runs on a GPU)."""
    seen = []

    def recording_sdpa(q, k, v, **options):
        seen.append((torch.backends.cuda.cudnn_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()))
        return q

    monkeypatch.setattr(kernels, "_on_cuda", lambda q: True)
    monkeypatch.setattr(kernels.F, "scaled_dot_product_attention", recording_sdpa)
    q = torch.randn(2, 4, 5, 8)
    kernels.fused_attention(q, q, q, None, False, 0.0)
    assert seen == [(False, True)]
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the user's setting outside the call is untouched


def _aten_calls(fn: Callable[[], None]) -> collections.Counter[str]:
    """The aten operators `fn` calls, nested included, by name, and "all"."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    calls = collections.Counter(event.name for event in prof.events() if event.name.startswith("aten::"))
    calls["all"] = calls.total()
    return calls


@pytest.mark.parametrize("parts", [2, 3])
def test_a_fused_projection_splits_into_the_heads_of_each_part_with_fewer_calls(parts: int) -> None:
    """split_projection against chunking the projection into its parts and splitting each into heads:
    the same values and strides forward, the same gradient back, fewer operator calls for both, and no
    more copies."""
    projected = torch.randn(BATCH, 7, parts * HEADS * DIM, requires_grad=True)
    weights = [torch.randn(BATCH, HEADS, 7, DIM) for _ in range(parts)]

    def chunked() -> list[torch.Tensor]:
        return [split_heads(t, HEADS) for t in projected.chunk(parts, dim=-1)]

    def backward(split: Callable[[], list[torch.Tensor]]) -> None:
        sum((t * w).sum() for t, w in zip(split(), weights, strict=True)).backward()

    for ours, reference in zip(split_projection(projected, parts, HEADS), chunked(), strict=True):
        assert torch.equal(ours, reference) and ours.stride() == reference.stride()
    backward(chunked)
    reference_grad, projected.grad = projected.grad, None
    backward(lambda: list(split_projection(projected, parts, HEADS)))
    assert torch.equal(projected.grad, reference_grad)
    ours = _aten_calls(lambda: backward(lambda: list(split_projection(projected, parts, HEADS))))
    reference = _aten_calls(lambda: backward(chunked))
    assert ours["all"] < reference["all"] and ours["aten::copy_"] <= reference["aten::copy_"]
