"""What fine-tuning NLLB-200-distilled-600M costs here, with random weights (no download): builds its
architecture as `init_from=<its directory>` would (its config.json's values, written out below, through
seq2seq.artifacts.m2m100.model_config), then times fine-tuning updates of --tokens padded tokens each
(sentences x the longest side, as batch_tokens counts them). Prints one JSON object: parameters, build
seconds, peak memory (the process's RSS; a GPU's allocated peak too), and at each size the seconds
per update, the tokens a second (padded, as --tokens and batch_tokens count them) and the model FLOP/s
(`update_flops`: the matrix multiplications of the forward and backward pass, counted from the shapes),
with the MFU against the device's peak where it is known (--peak-tflops, or an H100/H200/A100 by
name), in bf16 autocast where the CPU has bf16 instructions (or a GPU is used), else fp32.

    python scripts/bench_nllb_shapes.py                       # 2,048 tokens, the CPU
    python scripts/bench_nllb_shapes.py --tokens 2048 4096 --device cuda
    python scripts/bench_nllb_shapes.py --device cuda --peak-tflops 989   # the GPU's dense bf16 peak
    python scripts/bench_nllb_shapes.py --smoke               # tiny shapes: that the script runs
    python scripts/bench_nllb_shapes.py --freeze embeddings   # freeze=[embeddings]: less memory
    python scripts/bench_nllb_shapes.py --trainable-top-layers 2 # trainable_top_layers=2
    python scripts/bench_nllb_shapes.py --vocab 32000         # a pruned vocabulary (data.prune_vocab)

--freeze and --trainable-top-layers freeze as a run's freeze= and trainable_top_layers= do
(seq2seq.train.freezing), before the optimiser sees the model; --vocab builds the output layer and
the embeddings with that many ids, the size data.prune_vocab leaves when the corpus uses that many.
Peak memory is the process's: one configuration an invocation.

The update is the run's objective (TeacherForcedLoss: the chunked projection of the 256k vocabulary,
label smoothing 0.1) with torch's AdamW over the model's parameters, dropout on; the project's own
flat-parameter Adam (seq2seq.train.update) moves the same bytes. Run it on an idle machine: 16.8 GB
of resident memory at 2,048 tokens, 22.0 GB at 4,096 (results/nllb_600m_shapes.amx.json; weights,
gradients and Adam's two moments in fp32 are 16 bytes per parameter, 9.8 GB, before activations).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

# facebook/nllb-200-distilled-600M's config.json (the keys the architecture reads).
NLLB_600M = dict(
    vocab_size=256206,
    d_model=1024,
    encoder_layers=12,
    decoder_layers=12,
    encoder_attention_heads=16,
    decoder_attention_heads=16,
    encoder_ffn_dim=4096,
    decoder_ffn_dim=4096,
    max_position_embeddings=1024,
    activation_function="relu",
    dropout=0.1,
    attention_dropout=0.1,
    activation_dropout=0.0,
    scale_embedding=True,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)
SMOKE = dict(vocab_size=1000, d_model=64, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=128, decoder_ffn_dim=128)
SENTENCE_TOKENS = 32  # each side's length: --tokens / 32 sentences
# Dense bf16 peaks (TFLOP/s, without sparsity) of the GPUs named here, for the MFU; --peak-tflops for another.
PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}


def update_flops(shape: dict, rows: int, src_len: int, tgt_len: int) -> int:
    """The FLOPs of one update's matrix multiplications, forward and backward (3x the forward's: each
    weight's gradient and its input's), for `rows` sentences of src_len and tgt_len tokens: every
    projection and FFN of both stacks (a multiply-add is 2 FLOPs), the attention's scores and
    weighted sums (all of them, the causal mask's zeros too, as the kernels compute them), the
    cross-attention's keys and values over the source, and the output layer over the vocabulary. Model
    FLOPs: the chunked loss's second forward of the output layer in the backward pass is not counted."""
    d, vocab = shape["d_model"], shape["vocab_size"]
    src, tgt = rows * src_len, rows * tgt_len  # tokens
    encoder = src * (4 * d * d + 2 * d * shape["encoder_ffn_dim"]) + rows * 2 * src_len * src_len * d
    decoder = tgt * (4 * d * d + 2 * d * d + 2 * d * shape["decoder_ffn_dim"]) + src * 2 * d * d
    decoder += rows * 2 * d * (tgt_len * tgt_len + tgt_len * src_len)
    forward = 2 * (shape["encoder_layers"] * encoder + shape["decoder_layers"] * decoder + tgt * d * vocab)
    return 3 * forward


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    if given is not None or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((peak for gpu, peak in PEAK_TFLOPS.items() if gpu in name), None)


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def build(shape: dict, device: torch.device) -> tuple[torch.nn.Module, float]:
    from transformers import M2M100Config

    from seq2seq.artifacts.m2m100 import model_config
    from seq2seq.data.tokenizer import PAD_ID
    from seq2seq.model.transformer import build_model

    start = time.perf_counter()
    cfg = model_config(M2M100Config(**shape), "nllb-200-distilled-600M (random weights)")
    model = build_model(cfg, shape["vocab_size"], shape["vocab_size"], PAD_ID).to(device)
    return model, time.perf_counter() - start


def seconds_per_update(model: torch.nn.Module, tokens: int, updates: int, bf16: bool, device: torch.device) -> float:
    from seq2seq.train.loss import TeacherForcedLoss

    objective = TeacherForcedLoss(model, smoothing=0.1).train()
    # A frozen parameter gets no gradient and no moments, as in a run (seq2seq.train.flat_parameters)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    rows, vocab = max(1, tokens // SENTENCE_TOKENS), model.output.weight.size(0)
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (rows, SENTENCE_TOKENS), generator=generator).to(device)
    tgt = torch.randint(4, vocab, (rows, SENTENCE_TOKENS + 1), generator=generator).to(device)
    times = []
    for _ in range(updates + 1):  # the first one allocates Adam's moments and warms the kernels: not timed
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss, _ = objective(src, tgt[:, :-1], tgt[:, 1:])
        (loss / rows).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sum(times[1:]) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2048])
    parser.add_argument("--updates", type=int, default=3, help="timed updates per size (after one untimed)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes: check that the script runs")
    parser.add_argument("--peak-tflops", type=float, help="the device's peak TFLOP/s, for the MFU")
    parser.add_argument("--freeze", nargs="+", default=[], choices=("embeddings", "encoder", "decoder"))
    parser.add_argument("--trainable-top-layers", type=int, help="as trainable_top_layers=: all but the top N frozen")
    parser.add_argument("--vocab", type=int, help="ids in the vocabulary (a pruned one); default: the model's 256,206")
    args = parser.parse_args()
    from seq2seq.cpuinfo import has_bf16

    device = torch.device(args.device)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and (device.type == "cuda" or has_bf16()))
    shape = {**NLLB_600M, **(SMOKE if args.smoke else {}), **({"vocab_size": args.vocab} if args.vocab else {})}
    model, build_seconds = build(shape, device)
    from seq2seq.train.freezing import freeze

    freeze(model, args.freeze, args.trainable_top_layers)
    result = {
        "shape": "smoke" if args.smoke else "nllb-200-distilled-600M",
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "freeze": args.freeze,
        "trainable_top_layers": args.trainable_top_layers,
        "vocab": shape["vocab_size"],
        "precision": "bf16 autocast" if bf16 else "fp32",
        "build_seconds": round(build_seconds, 2),
        "seconds_per_update": {},
        "tokens_per_second": {},
        "model_tflops_per_second": {},
        "machine": machine_info(),
    }
    peak = peak_tflops(device, args.peak_tflops)
    if peak is not None:
        result["peak_tflops"], result["mfu"] = peak, {}
    for tokens in args.tokens:
        seconds = seconds_per_update(model, tokens, args.updates, bf16, device)
        rows = max(1, tokens // SENTENCE_TOKENS)
        flops = update_flops(shape, rows, SENTENCE_TOKENS, SENTENCE_TOKENS)
        result["seconds_per_update"][str(tokens)] = round(seconds, 3)
        result["tokens_per_second"][str(tokens)] = round(rows * SENTENCE_TOKENS / seconds, 1)  # as --tokens counts
        result["model_tflops_per_second"][str(tokens)] = float(f"{flops / seconds / 1e12:.4g}")
        if peak is not None:
            result["mfu"][str(tokens)] = float(f"{flops / seconds / 1e12 / peak:.4g}")
    result["peak_rss_gb"] = round(peak_rss_gb(), 2)
    if device.type == "cuda":
        result["peak_gpu_allocated_gb"] = round(torch.cuda.max_memory_allocated() / 1024**3, 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
