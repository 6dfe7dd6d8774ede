"""scripts/bench_nllb_shapes.py: the FLOPs it divides by the seconds (its model FLOP/s and MFU) against
torch's own count of one update's matrix multiplications, and its JSON at the tiny --smoke shapes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from script_module import SCRIPTS, load_script

pytest.importorskip("transformers", reason="the script reads M2M100Config: `pip install seq2seq[huggingface]`")


def test_the_update_flops_are_torchs_count_of_one_update() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from seq2seq.train.loss import TeacherForcedLoss

    bench = load_script("bench_nllb_shapes")
    shape = {**bench.NLLB_600M, **bench.SMOKE}
    model, _ = bench.build(shape, torch.device("cpu"))
    objective = TeacherForcedLoss(model, smoothing=0.1).train()
    rows, src_len, tgt_len = 3, 7, 5  # unequal sides: the cross-attention's and each stack's terms apart
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, shape["vocab_size"], (rows, src_len), generator=generator)
    tgt = torch.randint(4, shape["vocab_size"], (rows, tgt_len + 1), generator=generator)
    with FlopCounterMode(display=False) as counter:
        loss, _ = objective(src, tgt[:, :-1], tgt[:, 1:])
        loss.backward()
    # torch counts one more forward of the output layer: the chunked loss computes each chunk's logits
    # again in the backward pass instead of keeping them (a recomputation, which model FLOPs leave out).
    recomputed = 2 * rows * tgt_len * shape["d_model"] * shape["vocab_size"]
    assert bench.update_flops(shape, rows, src_len, tgt_len) + recomputed == counter.get_total_flops()


def test_the_smoke_run_prints_tokens_a_second_flops_and_mfu_and_freezes_and_prunes_as_a_run_would() -> None:
    """One run of the script (its start is most of its time) at the smoke shapes (d_model 64, FFN 128,
    2 + 2 layers, tied embeddings) with --trainable-top-layers 1 --vocab 500. Counted by hand, an encoder
    layer has 4 x (64 x 64 + 64) attention + (64 x 128 + 128) + (128 x 64 + 64) FFN + 2 x 128 norm =
    33,472 parameters, a decoder layer one more attention and norm, 50,240; the one embedding 500 x 64 =
    32,000; the two final norms 256. Trainable: the top layer of each stack and the final norms."""
    encoder_layer = 4 * (64 * 64 + 64) + (64 * 128 + 128) + (128 * 64 + 64) + 2 * 128
    decoder_layer = encoder_layer + 4 * (64 * 64 + 64) + 128
    command = [sys.executable, str(SCRIPTS / "bench_nllb_shapes.py"), "--smoke", "--tokens", "64", "128",
               "--updates", "1", "--precision", "fp32", "--peak-tflops", "2.5",
               "--trainable-top-layers", "1", "--vocab", "500"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["shape"] == "smoke" and result["peak_tflops"] == 2.5
    for tokens in ("64", "128"):
        assert result["tokens_per_second"][tokens] > 0 and result["model_tflops_per_second"][tokens] > 0
        assert result["mfu"][tokens] == pytest.approx(result["model_tflops_per_second"][tokens] / 2.5, rel=1e-3)
    assert result["vocab"] == 500
    assert result["parameters"] == 500 * 64 + 2 * encoder_layer + 2 * decoder_layer + 2 * 128
    assert result["trainable_parameters"] == encoder_layer + decoder_layer + 2 * 128
