"""The CUDA paths on a real GPU: out-of-memory split-and-retry, the grad scaler with our Adam,
the attention kernels, half-precision translation against fp32, and CTranslate2 on CUDA (compile
against eager on CUDA: tests/test_precision_compile.py).

Skipped without a GPU (CI has none); `scripts/check_gpu.sh` runs them, with the whole suite, on one.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_config, train_logging
from numerics import assert_close, reordered_sum_tolerance
from test_precision_compile import make_trainer

from seq2seq.data.batching import collate, split_batch
from seq2seq.data.builtin import reverse_pair
from seq2seq.inference.translator import Translator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
CUDA = torch.device("cuda")


# ---- out of memory: a real torch.OutOfMemoryError, survived by splitting the batch ----------------
def _reserved_peak(trainer, batches) -> tuple[int, tuple[float, float]]:
    """The most memory the caching allocator held while `batches` made their gradients, and the sums."""
    trainer.model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    sums = trainer.update._accumulate(batches, float(sum(b.tgt_tokens for b in batches)), 1)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_reserved(), sums


def test_a_real_out_of_memory_is_survived_by_splitting_the_batch(tmp_path: Path) -> None:
    """The allocator is capped between what half the batch and the whole batch need, so the whole batch
    raises torch.OutOfMemoryError inside the real forward pass. The update is redone in two halves: the
    same gradients up to the order of the sums, and the update is made."""
    trainer = make_trainer(tmp_path, CUDA, ["model=small", "precision=fp32", "data.task_train_size=3000"])
    sentences = np.arange(3000)
    batch = collate(trainer.data.train, sentences, trainer.parts.model.config.max_positions)
    whole_peak, (expected_loss, _) = _reserved_peak(trainer, [batch.to(CUDA)])
    expected = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()}
    half_peak, _ = _reserved_peak(trainer, [b.to(CUDA) for b in split_batch(batch)])
    assert half_peak < 0.8 * whole_peak, (half_peak, whole_peak)  # else no cap tells them apart

    total = torch.cuda.get_device_properties(CUDA).total_memory
    trainer.model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction((half_peak + whole_peak) / 2 / total)  # the current GPU
    try:
        with pytest.raises(torch.OutOfMemoryError):  # the cap really stops the whole batch
            loss, _ = trainer.objective(*(t.to(CUDA) for t in (batch.src, batch.tgt_in, batch.tgt_out)))
            loss.backward()
        gc.collect()  # the exception's traceback held the failed pass's activations
        trainer.model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        warnings: list[str] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: warnings.append(record.getMessage())
        logging.getLogger("seq2seq.train.update").addHandler(handler)
        try:
            sums = trainer.update._gradients([batch], 1)
        finally:
            logging.getLogger("seq2seq.train.update").removeHandler(handler)
        assert sums is not None
        assert any("ran out of memory" in w and "retrying it in 2 micro-batches" in w for w in warnings), warnings
        # The halves sum each gradient element over their own tokens first, then add the two sums.
        tokens = batch.src.numel() + batch.tgt_in.numel()
        assert abs(sums[0] - expected_loss) <= reordered_sum_tolerance(tokens, abs(expected_loss))
        for name, param in trainer.model.named_parameters():
            atol = reordered_sum_tolerance(tokens, float(expected[name].abs().max()) + 1e-30)
            assert_close(param.grad, expected[name], f"{name} (split vs whole)", atol=atol, rtol=1e-5)
        trainer.model.zero_grad(set_to_none=True)
        trainer.stream.next_update = lambda *_args: [batch]
        assert trainer.train_step() is not None and trainer.step == 1  # the whole update, under the cap
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


# ---- attention: no kernel that plans per shape -----------------------------------------------------
def test_training_attention_runs_no_cudnn_kernel(tmp_path: Path) -> None:
    """cuDNN's SDPA plans each new shape (~25 ms of CPU per call seen on an H100); every batch has new
    lengths. The kernels that ran in a padded forward and backward, read from the profiler."""
    from torch.profiler import ProfilerActivity, profile

    trainer = make_trainer(tmp_path, CUDA, ["precision=bf16"])
    batch = collate(trainer.data.train, np.arange(16), trainer.parts.model.config.max_positions).to(CUDA)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiled, trainer.update.autocast():
        loss, _ = trainer.objective(batch.src, batch.tgt_in, batch.tgt_out)
        loss.backward()
        torch.cuda.synchronize()
    names = {event.key for event in profiled.key_averages()}
    assert any("scaled_dot_product" in name for name in names), sorted(names)
    assert not [name for name in names if "cudnn_attention" in name], sorted(names)


def test_every_training_attention_call_may_run_flash_or_memory_efficient_attention(tmp_path, monkeypatch):
    """Each SDPA call of a padded bf16 forward, judged by torch's own selection rules
    (torch.backends.cuda.can_use_flash_attention / can_use_efficient_attention, which SDPA consults):
    our masks (a key padding mask, is_causal for the decoder) must leave it a fused kernel, never the
    math fallback that materialises the weights. Flash takes no mask: calls without one must qualify."""
    from torch.backends.cuda import SDPAParams, can_use_efficient_attention, can_use_flash_attention

    import seq2seq.model.kernels as kernels

    calls = []
    original = kernels.F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **rest):
        calls.append(SDPAParams(q, k, v, attn_mask, dropout_p, is_causal, False))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **rest)

    monkeypatch.setattr(kernels.F, "scaled_dot_product_attention", recording)
    trainer = make_trainer(tmp_path, CUDA, ["precision=bf16"])
    batch = collate(trainer.data.train, np.arange(16), trainer.parts.model.config.max_positions).to(CUDA)
    with trainer.update.autocast():
        trainer.objective(batch.src, batch.tgt_in, batch.tgt_out)
    layers = trainer.parts.model.config.encoder_layers + 2 * trainer.parts.model.config.decoder_layers
    assert len(calls) == layers
    assert any(call.is_causal for call in calls)  # the decoder's self-attention reached SDPA as causal
    for call in calls:
        fused = can_use_efficient_attention(call, True) or can_use_flash_attention(call, True)
        assert fused, (call.query.shape, call.key.shape, call.attn_mask is not None, call.is_causal)
        if call.attn_mask is None:
            assert can_use_flash_attention(call, True), (call.query.shape, call.query.dtype)


# ---- fp16: the grad scaler around our own Adam --------------------------------------------------
def test_fp16_overflow_is_skipped_by_the_scaler_and_training_goes_on(tmp_path: Path) -> None:
    """A scale so large that the fp16 gradients overflow: the update must be skipped on the device (no
    parameter moves, Adam's moments stay zero), the scaler halves its scale, and later updates train."""
    trainer = make_trainer(tmp_path, CUDA, ["precision=fp16", "data.task_train_size=400"])
    assert trainer.scaler.is_enabled()
    fixed = collate(trainer.data.train, np.arange(64), trainer.parts.model.config.max_positions)
    trainer.stream.next_update = lambda *_args: [fixed]
    trainer.scaler = torch.amp.GradScaler("cuda", init_scale=2.0**60)  # the backward overflows fp16 (6.5e4)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    assert trainer.train_step() is not None
    trainer.check_updates()
    (first,) = trainer.take_read_back()  # what this or train_step's own periodic check read back
    assert first.skipped and trainer.skipped_updates == 1
    for state in trainer.optimizer.state.values():
        assert int(state["step"]) == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    for name, param in trainer.model.named_parameters():
        assert torch.equal(param, before[name]), name
    assert trainer.scaler.get_scale() == pytest.approx(2.0**59)
    losses: list[float] = []
    for _ in range(200):  # the scale halves on every overflow until the gradients fit fp16
        trainer.train_step()
        trainer.check_updates()
        losses += [r.loss for r in trainer.take_read_back() if not r.skipped]
        if len(losses) == 30:
            break
    assert len(losses) == 30 and trainer.skipped_updates == trainer.step - 30
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < 0.9 * np.mean(losses[:5]), losses
    saved = trainer.training_state().scaler
    assert saved["scale"] == trainer.scaler.get_scale() < 2.0**59  # the scaler's state goes into the checkpoint


# ---- a model trained on the GPU, translated in each precision and engine ----------------------------
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model on the built-in task, trained on the GPU to 95% exact match (about a minute)."""
    run_dir = tmp_path_factory.mktemp("cuda_run")
    overrides = ["device=cuda", "progress=false", "attention_images=false", "precision=bf16", "valid_every=200"]
    summary, lines = train_logging(compose_config("train", overrides), run_dir)
    assert any("target reached" in line or "reached the target" in line for line in lines), lines[-5:]
    return run_dir


def _task_lines(count: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrst")
    return [" ".join(rng.choice(letters, size=int(rng.integers(3, 13)))) for _ in range(count)]


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_translation_agrees_with_fp32(trained_run: Path, precision: str) -> None:
    """The same run decoded in fp16/bf16 and fp32 (beam 5): a well-trained model's choices have wide
    margins, so rounding the logits to 8 (bf16) or 11 (fp16) bits changes few lines, and accuracy not
    by more than two points."""
    lines = _task_lines(300)
    truth = [reverse_pair(line) for line in lines]
    fp32 = Translator.load(trained_run, precision="fp32", device="cuda", beam=5).translate(lines)
    half = Translator.load(trained_run, precision=precision, device="cuda", beam=5)
    assert next(half.model.parameters()).dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    ours = half.translate(lines)
    agreement = np.mean([a == b for a, b in zip(ours, fp32, strict=True)])
    outputs = {"fp32": fp32, precision: ours}
    accuracy = {name: np.mean([a == b for a, b in zip(out, truth, strict=True)]) for name, out in outputs.items()}
    assert accuracy["fp32"] >= 0.9, accuracy
    assert agreement >= 0.95 and abs(accuracy[precision] - accuracy["fp32"]) <= 0.02, (agreement, accuracy)


def test_ctranslate2_on_cuda_writes_the_lines_it_writes_on_the_cpu(trained_run: Path) -> None:
    ctranslate2 = pytest.importorskip("ctranslate2")
    from seq2seq.config import UserError
    from seq2seq.inference.ctranslate2_engine import CTranslate2Translator

    if ctranslate2.get_cuda_device_count() == 0:
        pytest.skip("this CTranslate2 build sees no CUDA device")
    lines = _task_lines(200, seed=11)
    cpu = CTranslate2Translator.load(trained_run, device="cpu", precision="fp32", beam=5).translate(lines)
    try:
        gpu_engine = CTranslate2Translator.load(trained_run, device="cuda", precision="fp32", beam=5)
        gpu = gpu_engine.translate(lines)
    except (UserError, RuntimeError) as err:
        if "libcublas" in str(err):  # the wheel is built for one CUDA major version's cuBLAS
            pytest.skip(f"CTranslate2 {ctranslate2.__version__} cannot load its cuBLAS here: {err}")
        raise
    agreement = np.mean([a == b for a, b in zip(gpu, cpu, strict=True)])
    assert agreement >= 0.98, agreement  # two GEMM libraries, one function: near-ties alone may flip
