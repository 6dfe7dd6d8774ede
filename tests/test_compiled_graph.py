"""The training objective as compile=true compiles it under torchrun or in fp16 (update.py; elsewhere the
whole update is one graph: tests/test_compiled_update.py): one graph, no graph break, so the step runs as
few large kernels and CUDA graphs can capture it whole. Traced on a CPU, dropout's cheaper mask is one
custom operator in the graph (its in-place `random_` cannot be traced as it is)."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

import seq2seq.model.dropout as dropout
from seq2seq.config import ModelConfig
from seq2seq.model.transformer import Transformer
from seq2seq.train.loss import TeacherForcedLoss


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_training_objective_compiles_into_one_graph(dynamic):
    """`dynamic`: every length and batch size symbolic, as the Trainer's torch.compile(dynamic=True)
    traces them; the decoder's `causal` then came out a symbolic bool that SDPA refused, breaking the
    graph at every decoder layer (6 graphs here) before kernels.attend branched on it instead."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.1)
    objective = TeacherForcedLoss(Transformer(cfg, 50, 50, pad_id=0), smoothing=0.1)
    objective.train()
    src, tgt_in, tgt_out = (torch.randint(1, 50, (3, 8)) for _ in range(3))
    tgt_out[0, -2:] = 0  # padding, as in a real batch
    positions = (tgt_out != 0).flatten().nonzero().squeeze(1)
    if dynamic:
        for tensor in (src, tgt_in, tgt_out):
            torch._dynamo.mark_dynamic(tensor, 0)
            torch._dynamo.mark_dynamic(tensor, 1)
        torch._dynamo.mark_dynamic(positions, 0)
    explained = torch._dynamo.explain(objective)(src, tgt_in, tgt_out, positions)
    assert explained.graph_break_count == 0, [reason.reason for reason in explained.break_reasons]
    assert explained.graph_count == 1


def test_traced_dropout_is_the_mask_operator_and_eager_dropout_the_cheap_mask(monkeypatch):
    """The check above would pass vacuously if the trace saw no dropout: traced, the layer calls the
    mask operator in the graph (no break); run eagerly on a CPU it draws the cheaper mask itself."""
    torch.manual_seed(0)
    layer = dropout.Dropout(0.1).train()
    masks = []
    keep_mask = layer._keep_mask
    monkeypatch.setattr(layer, "_keep_mask", lambda shape: masks.append(shape) or keep_mask(shape))

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return layer(x * 2) + 1

    explained = torch._dynamo.explain(scaled)(torch.ones(4, 4))
    assert explained.graph_break_count == 0
    assert "seq2seq.keep_mask" in explained.graphs[0].code
    assert masks == []
    scaled(torch.ones(4, 4))
    assert masks == [torch.Size([4, 4])]
