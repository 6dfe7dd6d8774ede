"""compile=true: the whole update (forward, loss, backward, clipping, Adam) traced as one graph, with
eager's losses, and few graphs over an epoch of batch shapes.

The one fast check is TorchDynamo's own account of the trace (`torch._dynamo.explain`: graphs and
breaks, no code generated); what Inductor generates from it is checked under `-m slow` (its C++ kernels
take minutes to build on a CPU)."""

from __future__ import annotations

import dataclasses
import os
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
import torch._dynamo
from conftest import TINY_TRAIN, compose_config
from numerics import assert_close, reordered_sum_tolerance
from omegaconf import DictConfig
from script_module import load_script

from seq2seq.config import ModelConfig
from seq2seq.data.batching import Batch, EpochBatches, collate
from seq2seq.data.pipeline import PreparedData, prepare_data
from seq2seq.measurement_cache import cache_file
from seq2seq.model.kernels import MAX_QUERIES_FOR_MATMULS
from seq2seq.model.transformer import Transformer
from seq2seq.train.compiled_update import CompiledUpdate, compile_settings, use_project_inductor_cache
from seq2seq.train.distributed import DistContext
from seq2seq.train.flat_parameters import FlatParameters
from seq2seq.train.loss import TeacherForcedLoss
from seq2seq.train.optim import build_optimizer
from seq2seq.train.parts import TrainingParts
from seq2seq.train.update import Update, training_model


def compiled_update_of(cfg: ModelConfig, vocab: int) -> CompiledUpdate:
    """The update compile=true runs, for a fresh model of `cfg` (seed 0) with `vocab` tokens a side."""
    torch.manual_seed(0)
    model = Transformer(cfg, vocab, vocab, pad_id=0)
    parameters = FlatParameters(model.parameters())
    optimizer = build_optimizer(parameters, compose_config("train", []).optim, cfg.d_model, lambda step: 0.0)
    objective = TeacherForcedLoss(model, smoothing=0.1).train()
    return CompiledUpdate(objective, parameters, optimizer, 1.0, nullcontext, None)


def tiny_compiled_update() -> CompiledUpdate:
    return compiled_update_of(
        ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.1), 40
    )


def test_the_whole_update_traces_into_one_graph() -> None:
    """No graph break anywhere in the update, on the CPU's own code path: the graph holds the
    backward (autograd.grad), the dropout (the mask operator), the clipping and Adam's arithmetic, not just the forward."""
    compiled = tiny_compiled_update()
    src, tgt_in, tgt_out = (torch.randint(1, 40, (3, 7)) for _ in range(3))
    tgt_out[0, -2:] = 0
    positions = (tgt_out != 0).flatten().nonzero().squeeze(1)
    scale, earlier_loss, lr = torch.tensor(0.05), torch.zeros(()), torch.tensor(1e-3)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        explained = torch._dynamo.explain(compiled._last_pass_and_step)(
            src, tgt_in, tgt_out, positions, scale, earlier_loss, lr
        )
    assert explained.graph_break_count == 0, [reason.reason for reason in explained.break_reasons]
    assert explained.graph_count == 1
    code = explained.graphs[0].code
    # autograd_function_apply: the loss in fixed chunks (compiled_loss.py), its backward in the graph
    for part in ("torch.autograd.grad", "seq2seq.keep_mask", "_foreach_mul_", ".lerp(", "autograd_function_apply"):
        assert part in code, part


@pytest.mark.parametrize("bf16", [False, True])
def test_aotautograds_cache_takes_the_update_graph(bf16: bool) -> None:
    """The graph Dynamo makes of the whole update (fp32, and bf16 under autocast) passes AOTAutograd's
    cache check in the settings the update compiles in: else every run traces and partitions the
    joint forward and backward again. Outside them the same graph is refused (the custom
    autograd.Functions; autocast's entry), which is what the settings are for."""
    from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache, check_cacheable

    compiled = tiny_compiled_update()
    if bf16:
        compiled.autocast = lambda: torch.autocast("cpu", torch.bfloat16)
    src, tgt_in, tgt_out = (torch.randint(1, 40, (3, 7)) for _ in range(3))
    positions = (tgt_out != 0).flatten().nonzero().squeeze(1)
    with compile_settings(on_cpu=True):
        explained = torch._dynamo.explain(compiled._last_pass_and_step)(
            src, tgt_in, tgt_out, positions, torch.tensor(0.05), torch.zeros(()), torch.tensor(1e-3)
        )
        (graph,) = explained.graphs
        check_cacheable(graph)
    with pytest.raises(BypassAOTAutogradCache, match="autocast" if bf16 else "autograd_function_apply"):
        check_cacheable(graph)


def make_update(cfg: DictConfig, data: PreparedData) -> Update:
    torch.manual_seed(0)
    cpu = torch.device("cpu")
    parts = TrainingParts.of(cfg, cpu)
    return Update(parts.update, training_model(parts.model, data, cpu), cpu, DistContext(), "fp32", lambda step: 0.0)


def config(compile_: bool, overrides: list[str] = ()) -> DictConfig:
    return compose_config("train", [*TINY_TRAIN, f"compile={str(compile_).lower()}", *overrides])


@pytest.mark.slow
def test_compiled_updates_make_the_eager_updates(tmp_path: Path) -> None:
    """Inductor's update against the eager one from the same weights, over batches of four shapes and
    an update of two micro-batches (the backward-only graph, then the last pass's): the same losses
    and gradient norms up to reordered float32 sums, and the weights they leave alike."""
    overrides = ["model.dropout=0.0", "data.task_train_size=64"]  # the same function on both paths
    eager_cfg, compiled_cfg = config(False, overrides), config(True, overrides)
    data = prepare_data(eager_cfg.data)
    eager, compiled = make_update(eager_cfg, data), make_update(compiled_cfg, data)
    assert compiled.compiled is not None and eager.compiled is None
    updates = [[np.arange(8)], [np.arange(8, 20)], [np.arange(20, 26), np.arange(26, 40)], [np.arange(40, 44)]]
    for step, sentence_groups in enumerate(updates, start=1):
        batches = [collate(data.train, group, eager_cfg.model.max_positions) for group in sentence_groups]
        (expected,) = eager.read_back([eager(batches, step)])
        (actual,) = compiled.read_back([compiled(batches, step)])
        vocab = data.tokenizers.tgt.get_vocab_size()
        tolerance = reordered_sum_tolerance(expected.tgt_tokens * vocab, expected.loss)
        assert abs(actual.loss - expected.loss) <= tolerance, (step, actual.loss, expected.loss)
        assert actual.grad_norm == pytest.approx(expected.grad_norm, rel=1e-4), step
        assert (actual.tgt_tokens, actual.skipped) == (expected.tgt_tokens, False)
    assert compiled.optimizer.updates == eager.optimizer.updates == 4
    assert compiled.optimizer.lr == eager.optimizer.lr
    assert compiled.compiled.graphs == 2  # the last pass's graph, and the backward-only one: no recompile
    for (name, mine), reference in zip(compiled.model.named_parameters(), eager.model.parameters(), strict=True):
        # Adam moves a weight whose gradient is float noise by up to lr either way: within a few rates
        assert_close(mine.detach(), reference.detach(), name, atol=4 * 4 * compiled.optimizer.lr)


@pytest.mark.slow
def test_an_epoch_of_batch_shapes_compiles_few_graphs() -> None:
    """One batch of each distinct shape in an epoch of the tiny run, traced as compile=true traces it
    (TorchDynamo only: backend "eager", no code generated): the graphs it makes are the recompiles."""
    cfg = config(True)
    data = prepare_data(cfg.data)
    update = make_update(cfg, data)
    stream = EpochBatches(data.train, cfg.batch_tokens, cfg.seed, cfg.model.max_positions)
    shapes: dict[tuple[int, ...], list] = {}
    for _ in range(len(stream)):
        (batch,) = stream.next_update(1, 0, 1)
        shapes.setdefault((*batch.src.shape, batch.tgt_in.size(1)), [batch])
    compile_eagerly = torch.compile
    torch._dynamo.reset()
    update.compiled._last = compile_eagerly(update.compiled._last_pass_and_step, backend="eager")
    for step, batches in enumerate(shapes.values(), start=1):
        update(batches, step)
    assert len(shapes) >= 8  # the tiny task's epoch: 8 (sentences, source, target) shapes
    # Wider than the tiny task's lines: a source width past MAX_QUERIES_FOR_MATMULS once recompiled
    # the step (a guard made by the attention's decoding shortcut).
    (batch,) = shapes[next(iter(shapes))]
    wide = torch.cat([batch.src[:, :-1], batch.src[:, 1:-1].repeat(1, 3), batch.src[:, -1:]], dim=1)
    assert wide.size(1) > MAX_QUERIES_FOR_MATMULS
    update([dataclasses.replace(batch, src=wide, src_tokens=int((wide != 0).sum()))], len(shapes) + 1)
    assert update.compiled.graphs == 1, (update.compiled.graphs, len(shapes))


@pytest.mark.slow
def test_compiled_accumulation_holds_no_copy_of_the_flat_gradient() -> None:
    """Compiled, the gradients are added into the flat buffer in place: what the update allocates
    beyond what it held before stays under the buffer's size (torch's CPU allocator, as
    scripts/step_profile.py counts it). Added into narrowed views, functionalised into a chain of
    slice_scatters, the generated code held two full-size copies of the buffer (issue #81)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 256) for _ in range(3)]
    net = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    parameters = FlatParameters(net.parameters())
    inputs = torch.randn(8, 256)

    def backward_pass(x: torch.Tensor) -> torch.Tensor:
        loss = net(x).square().mean()
        parameters.accumulate(torch.autograd.grad(loss, parameters.params))
        return loss.detach()

    compiled = torch.compile(backward_pass)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled(inputs)  # compiles
        expected = [param.grad.clone() * 2 for param in parameters.params]
        peak = (
            load_script("step_profile").peak_allocated_per_update(lambda: compiled(inputs), 1)["peak_allocated_mb"]
            * 2**20
        )
    flat_bytes = parameters.buffers[0].grad.numel() * 4
    assert peak < flat_bytes, (peak, flat_bytes)
    for param, grad in zip(parameters.params, expected, strict=True):
        assert_close(param.grad, grad, "gradient", atol=1e-6)


def test_compiled_feed_forwards_hold_no_more_at_their_peak_than_eager() -> None:
    """Four feed-forward sublayers in a row, forward and backward on (batch, length, d_model) input,
    compiled and eager: the compiled pass allocates no more at its peak. Applied to the 3-d input,
    each first linear's output was the ReLU's input, and Inductor wrote the ReLU's backward mask from
    it (the ReLU recomputed) while the second linear held the ReLU's output: two (tokens x ffn_dim)
    activations a layer held from the forward to the backward, where eager holds one (issue #81)."""
    from seq2seq.model.layers import FeedForward

    torch.manual_seed(0)
    ffns = torch.nn.Sequential(*(FeedForward(64, 1024, "relu", dropout=0.0) for _ in range(4)))
    x = torch.randn(16, 32, 64, requires_grad=True)
    weights = list(ffns.parameters())

    def forward_and_backward(x: torch.Tensor) -> list[torch.Tensor]:
        return list(torch.autograd.grad(ffns(x).square().sum(), [x, *weights]))

    peak = load_script("step_profile").peak_allocated_per_update
    compiled = torch.compile(forward_and_backward)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        expected = forward_and_backward(x)
        eager_peak = peak(lambda: forward_and_backward(x), 1)["peak_allocated_mb"]
        got = compiled(x)  # compiles
        compiled_peak = peak(lambda: compiled(x), 1)["peak_allocated_mb"]
    for gradient, reference in zip(got, expected, strict=True):  # sums in another order: a few ulps
        assert_close(gradient, reference, "gradient", atol=1e-5, rtol=1e-5)
    assert compiled_peak <= eager_peak, (compiled_peak, eager_peak)


@pytest.mark.slow
def test_compiled_update_holds_no_more_at_its_peak_than_eager() -> None:
    """The update of a 1+1-layer model of the base model's width, on 4,096 source and 4,096 target
    tokens, compiled and eager, from the same weights and batch: the compiled one allocates no more at its peak (torch's
    CPU allocator, as scripts/step_profile.py counts it). With F.embedding traced as it is, Inductor
    filled both look-ups' (vocabulary x d_model) gradient zeros in the forward pass and held them
    through its peak, which then exceeded eager's (issue #81; seq2seq.model.embedding.LookupGradientMadeLate)."""
    cfg = ModelConfig(d_model=512, heads=8, ffn_dim=2048, encoder_layers=1, decoder_layers=1, dropout=0.0)
    update = compiled_update_of(cfg, 8000)
    src, tgt_in, tgt_out = (torch.randint(1, 8000, (128, 32)) for _ in range(3))
    positions = (tgt_out != 0).flatten().nonzero().squeeze(1)
    inputs = (src, tgt_in, tgt_out, positions, torch.tensor(1 / 4096), torch.zeros(()), torch.tensor(0.0))
    peak = load_script("step_profile").peak_allocated_per_update
    eager = update._last_pass_and_step
    compiled = torch.compile(eager)
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        eager(*inputs)
        eager_peak = peak(lambda: eager(*inputs), 1)["peak_allocated_mb"]
        compiled(*inputs)  # compiles
        compiled_peak = peak(lambda: compiled(*inputs), 1)["peak_allocated_mb"]
    assert compiled_peak <= eager_peak, (compiled_peak, eager_peak)


@pytest.mark.slow
def test_compiled_bf16_update_holds_no_more_at_its_peak_than_eager() -> None:
    """A 1+1-layer model's whole update in bf16 (CPU autocast), through `last_pass_and_step` as
    training calls it, and the same update eager: the compiled one allocates no more at its peak. With
    Inductor's default rule each post-norm residual sum, x + dropout(sublayer), was recomputed for its
    layer norm's backward, so the bf16 sublayer output was held beside x where eager holds the sum
    (issue #81; compiled_update.CPU_REALIZE_READS_THRESHOLD): 4.46 MB against eager's 4.36 without it."""
    # A fresh TorchDynamo: after the other compiled tests of this file its compile failed ("Storage
    # size calculation overflowed"), with Inductor's default threshold as well.
    torch._dynamo.reset()
    cfg = ModelConfig(d_model=64, heads=4, ffn_dim=256, encoder_layers=1, decoder_layers=1, dropout=0.1)
    update = compiled_update_of(cfg, 64)
    update.autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    torch.manual_seed(1)
    src, tgt_in, tgt_out = (torch.randint(1, 64, (16, 32)) for _ in range(3))
    positions = (tgt_out != 0).flatten().nonzero().squeeze(1)
    tokens = src.numel()  # no padding: every id is 1 or more
    batch = Batch(src, tgt_in, tgt_out, np.arange(16), tokens, tokens, positions)
    scale, earlier_loss, lr = 1 / tokens, torch.zeros(()), 0.0
    eager_inputs = (src, tgt_in, tgt_out, positions, update._scalar(scale), earlier_loss, update._scalar(lr))
    peak = load_script("step_profile").peak_allocated_per_update
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        eager_peak = peak(lambda: update._last_pass_and_step(*eager_inputs), 1)
    update.last_pass_and_step(batch, scale, earlier_loss, lr)  # compiles
    compiled_peak = peak(lambda: update.last_pass_and_step(batch, scale, earlier_loss, lr), 1)
    assert update.graphs == 1
    assert compiled_peak["peak_allocated_mb"] <= eager_peak["peak_allocated_mb"], (compiled_peak, eager_peak)


def test_inductors_cache_goes_to_the_project_cache_unless_the_user_chose_one(monkeypatch, tmp_path: Path) -> None:
    """Torch writes its default (/tmp/torchinductor_<user>) into TORCHINDUCTOR_CACHE_DIR when it first
    looks: that is replaced as an unset one is; a folder the user named is kept."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    ours = str(cache_file("inductor"))
    for before in (None, default_cache_dir()):
        if before is None:
            monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        else:
            monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", before)
        assert use_project_inductor_cache() == ours == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert use_project_inductor_cache() == str(tmp_path)
