"""`compile=true` and mixed precision change how the loss is computed, never what it is.

The compiled objective is checked against the eager one on CPU; the CUDA autocast paths (bf16, and
fp16 with its grad scaler) run where a GPU exists and are skipped elsewhere. The CPU bf16 path is
covered in test_loss_optim.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_config
from numerics import assert_close, reordered_sum_tolerance

from seq2seq.data.batching import collate
from seq2seq.data.pipeline import prepare_data
from seq2seq.train.distributed import DistContext
from seq2seq.train.parts import TrainingParts
from seq2seq.train.trainer import Trainer

OVERRIDES = [
    "data.task_train_size=64",
    "data.task_valid_size=8",
    "model.dropout=0.0",  # deterministic: both paths must see the same function
    "threads=1",
    "attention_images=false",
]
SENTENCES = np.arange(16)


def make_trainer(tmp_path: Path, device: torch.device, overrides: list[str]) -> Trainer:
    cfg = compose_config("train", [*OVERRIDES, *overrides])
    data = prepare_data(cfg.data)
    torch.manual_seed(0)
    return Trainer(TrainingParts.of(cfg, device), tmp_path, data, device, DistContext())


def loss_and_grads(module: torch.nn.Module, trainer: Trainer, device: torch.device) -> tuple[float, dict]:
    batch = collate(trainer.data.train, SENTENCES, trainer.parts.model.config.max_positions).to(device)
    trainer.model.zero_grad(set_to_none=True)
    with trainer.update.autocast():
        loss, _ = module(batch.src, batch.tgt_in, batch.tgt_out)
    (loss / batch.tgt_tokens).backward()
    grads = {name: p.grad.detach().float().clone() for name, p in trainer.model.named_parameters()}
    return float(loss), grads


def test_one_eager_process_trains_the_objective_itself(tmp_path: Path) -> None:
    """Without torchrun or compile=true there is no wrapper: training and validation run one module."""
    trainer = make_trainer(tmp_path, torch.device("cpu"), [])
    assert trainer.update.training_objective is trainer.objective


@pytest.mark.parametrize(("setting", "mode"), [("default", None), ("reduce-overhead", "reduce-overhead")])
def test_compile_mode_reaches_torch_compile(tmp_path: Path, monkeypatch, setting: str, mode: str | None) -> None:
    """compile_mode is torch.compile's `mode`; "default" leaves it unset, as torch.compile's own default.
    In fp32 the update's two passes and its step (compiled_update.py; the step alone is called only under
    torchrun) are compiled, not the objective."""
    asked: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda module, **options: asked.append(options) or module)
    trainer = make_trainer(tmp_path, torch.device("cpu"), ["compile=true", f"compile_mode={setting}", "precision=fp32"])
    assert asked == [{"mode": mode}] * 3
    assert trainer.update.compiled is not None
    assert trainer.update.training_objective is trainer.objective


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


ONE_LAYER = ["model.encoder_layers=1", "model.decoder_layers=1"]


@pytest.mark.parametrize(
    ("device", "backend", "model"),
    [
        # torch.compile's tracing (TorchDynamo, dynamic shapes) and AOTAutograd's joint graph, without
        # Inductor's code generation, which on a CPU builds C++ kernels for minutes: the default run's check,
        # on one layer a side (each layer is traced again: 12 s with the tiny model's two).
        pytest.param("cpu", "aot_eager", ONE_LAYER, id="cpu-aot_eager-one_layer"),
        pytest.param("cpu", "aot_eager", [], marks=pytest.mark.slow, id="cpu-aot_eager"),  # by default: -one_layer
        pytest.param("cpu", "inductor", [], marks=pytest.mark.slow, id="cpu-inductor"),  # also generated code
        pytest.param("cuda", "inductor", [], marks=CUDA, id="cuda-inductor"),
    ],
)
def test_compiled_objective_gives_the_eager_loss_and_gradients(
    tmp_path: Path, device: str, backend: str, model: list[str]
) -> None:
    """The objective as compile=true compiles it under torchrun or in fp16 (torch.compile(dynamic=True);
    the loss traced as the plain one, not the chunked one eager runs) against the eager objective."""
    pytest.importorskip("torch._inductor")
    where = torch.device(device)
    trainer = make_trainer(tmp_path, where, ["precision=fp32", *model])
    compiled = torch.compile(trainer.objective, dynamic=True, backend=backend)
    eager_loss, eager_grads = loss_and_grads(trainer.objective, trainer, where)
    compiled_loss, compiled_grads = loss_and_grads(compiled, trainer, where)
    # Inductor fuses the kernels (C++ on a CPU, Triton on a GPU), sums in its own order and vector width,
    # and brings its own exp and log: the same function up to reordered float32 sums. The loss sums every target token's
    # log-softmax over the vocabulary; a gradient element sums over the batch's tokens at the end of a
    # backward chain through every layer's dot products of up to ffn_dim terms.
    batch = collate(trainer.data.train, SENTENCES, trainer.parts.model.config.max_positions)
    model = trainer.parts.model.config
    loss_terms = batch.tgt_tokens * trainer.data.tokenizers.tgt.get_vocab_size()
    loss_tolerance = reordered_sum_tolerance(loss_terms, abs(eager_loss))
    assert abs(compiled_loss - eager_loss) <= loss_tolerance, (compiled_loss, eager_loss, loss_tolerance)
    tokens = batch.src.numel() + batch.tgt_in.numel()
    terms = tokens + (model.encoder_layers + model.decoder_layers) * model.ffn_dim
    for name, grad in eager_grads.items():
        atol = reordered_sum_tolerance(terms, float(grad.abs().max()))
        assert_close(compiled_grads[name], grad, f"{name} (compiled vs eager)", atol=atol)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_update_on_cuda(tmp_path: Path, precision: str) -> None:
    """One update under autocast: the loss is fp32 and within 2% of the fp32 loss of the same batch,
    the parameters move, and fp16 goes through the grad scaler."""
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    cuda = torch.device("cuda")
    reference = make_trainer(tmp_path / "fp32", cuda, ["precision=fp32"])
    reference_loss, _ = loss_and_grads(reference.objective, reference, cuda)

    trainer = make_trainer(tmp_path / precision, cuda, [f"precision={precision}"])
    batch = collate(trainer.data.train, SENTENCES, trainer.parts.model.config.max_positions).to(cuda)
    with trainer.update.autocast():
        loss, _ = trainer.update.training_objective(batch.src, batch.tgt_in, batch.tgt_out)
    assert loss.dtype == torch.float32  # the softmax and loss are taken in fp32
    assert float(loss) == pytest.approx(reference_loss, rel=0.02)

    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.stream.next_update = lambda *_args: [
        collate(trainer.data.train, SENTENCES, trainer.parts.model.config.max_positions)
    ]
    assert trainer.train_step() is not None
    assert trainer.scaler.is_enabled() == (precision == "fp16")
    moved = [not torch.equal(before[name], p.detach()) for name, p in trainer.model.named_parameters()]
    assert all(moved)
