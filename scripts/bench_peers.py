"""seq2seq's training throughput beside Marian's and Eole's, like for like, in one window; prints JSON.

    python scripts/bench_peers.py --data-dir data/multi30k --marian PATH/marian --eole PATH/eole \
        --work /tmp/peers --rounds 2 --json results/peers_small.CLASS.json

Like for like: the three train the same Transformer (3+3 layers, d_model 256, 4 heads, FFN 1024, ReLU,
dropout 0.1, label smoothing 0.1, the target embedding tied to the output layer, fp32, 2 threads) on
the same token sequences: the Multi30k en-de training split exactly as seq2seq tokenizes it (its joint
8k BPE), written out as space-separated pieces with a vocabulary of exactly those pieces, so that no
tool's own tokenizer decides how long a batch is. Marian's batches are set to seq2seq's real target
tokens per update (measured in the first seq2seq run); Eole's batch size, which counts tokens its own
way, is calibrated to about the same by a short probe run. Where the tools cannot agree, the report
says so (`differences`).

Each round runs seq2seq (scripts/bench_train.py, its own process; with --compiled its compile=true
too, whose first updates compile), then Marian, then Eole; rounds repeat (A, B, C, A, B, C), so a
drift of the machine shows in every tool's rows. A peer's rate is the
target tokens it reports between two of its own progress lines after --warmup updates, over the seconds
it reports for them (Marian: "after N" labels and "Time"; Eole: its tgt tok/s over each interval). The
fp32 GEMM rate is measured in this process right after every peer run (bench_train measures its own
after its timed updates), and a peer's model GFLOP/s is its target tokens/s times the FLOPs a target
token cost in seq2seq's first run (bench_train.flops_per_update: the same model, the same batches'
source/target ratio). Run it idle: it measures the machine as much as the tools.
"""

from __future__ import annotations

# isort: off
from seq2seq.startup import prepare_process

prepare_process()  # before torch, as bench_train.py: the GEMM rate measured here waits as seq2seq's threads do
# isort: on

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from hydra import compose, initialize_config_module  # noqa: E402

import seq2seq.cli.train  # noqa: E402,F401  (registers the config schema)
from seq2seq.data.pipeline import prepare_data  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train import matmul_peak_gflops  # noqa: E402
from machine import machine_info, write_json_report  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent
FIRST_ID = 4  # ids below are seq2seq's specials (pad, bos, eos, unk): no text carries them

# What each peer does differently from seq2seq's small model, which no flag of theirs changes.
DIFFERENCES = {
    "marian": "2 CPU threads are 2 graphs each on one core (Marian's CPU training), MKL sequential; "
    "post-norm as seq2seq; no biases to switch off",
    "eole": "pre-norm (Eole's decoder has no post-norm layer; its encoder's would, so both are left "
    "pre-norm alike); PyTorch's own threads (2), its own allocator",
}


def export_corpus(overrides: list[str], work: Path) -> dict[str, float]:
    """The training split of the run `overrides` compose (seq2seq-train's keys) as piece text
    (train.en / train.de) and the pieces as Marian's and Eole's vocabularies; returns the real tokens
    of each side, for the source/target ratio."""
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        cfg = compose("train", overrides=overrides)
    data = prepare_data(cfg.data)
    tokenizer = data.tokenizers.tgt
    if not data.tokenizers.joint:
        raise SystemExit("bench_peers: needs the joint vocabulary (data.joint_vocab=true)")
    pieces = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    if any(not p or any(c.isspace() for c in p) for p in pieces[FIRST_ID:]):
        raise SystemExit("bench_peers: a piece holds whitespace; the peers split their input on it")
    work.mkdir(parents=True, exist_ok=True)
    tokens = {}
    for side, column in (("en", data.train.src), ("de", data.train.tgt)):
        lines = [" ".join(pieces[i] for i in column[row] if i >= FIRST_ID) for row in range(len(column))]
        (work / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        tokens[side] = float(sum(len(line.split()) for line in lines))
    # Marian: its end-of-sentence and unknown tokens first, then every piece; JSON is YAML for Marian.
    marian_vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces[FIRST_ID:]:
        marian_vocab.setdefault(piece, len(marian_vocab))
    (work / "vocab.json").write_text(json.dumps(marian_vocab, ensure_ascii=False), encoding="utf-8")
    (work / "vocab.eole").write_text("\n".join(pieces[FIRST_ID:]) + "\n", encoding="utf-8")
    return tokens


def run_seq2seq(args: argparse.Namespace, compiled: bool = False, processes: int = 1) -> dict:
    """seq2seq's row: one process of 2 threads, or under torchrun `processes` of one thread each with
    their share of the update's 4,096 tokens (a process a core, as Marian's graphs are a thread each)."""
    launcher = [sys.executable]
    if processes > 1:
        launcher = [str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc_per_node={processes}"]
    command = [
        *launcher,
        str(SCRIPTS / "bench_train.py"),
        f"--data-dir={args.data_dir}",
        "--model=small",
        f"--batch-tokens={4096 // processes}",
        "--precision=fp32",
        f"--threads={2 if processes == 1 else 1}",
        f"--warmup={args.warmup}",
        f"--steps={args.updates}",
        *(["--compile"] if compiled else []),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    report = json.loads(done.stdout)
    tool = "seq2seq compile=true" if compiled else "seq2seq"
    return {
        "tool": tool if processes == 1 else f"{tool}, {processes} processes x 1 thread",
        "wall_s": round(time.perf_counter() - start, 1),
        "tgt_tokens_per_s": round(report["tgt_tokens_per_s"], 1),
        "real_tgt_tokens_per_update": round(report["real_tgt_tokens_per_batch"], 1),
        "model_gflops_per_s": report["model_gflops_per_s"],
        "gemm_gflops_per_s": report["matmul_peak_gflops_per_s"],
        "share_of_gemm_rate": report["mfu_vs_fp32_peak"],
        "peak_rss_mb": report["peak_rss_mb"],
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


MARIAN_LINE = re.compile(r"Up\. ([\d,]+) .* after ([\d,]+) : Time ([\d.]+)s")


def marian_intervals(log: str) -> list[tuple[int, float, float]]:
    """(update, target tokens, seconds) of each interval between two of Marian's progress lines: its
    "after N" counts the target labels so far, its "Time" the seconds since the line before."""
    lines = [(int(u.replace(",", "")), int(a.replace(",", "")), float(t)) for u, a, t in MARIAN_LINE.findall(log)]
    return [(u, a - b, t) for (u, a, t), (_, b, _) in zip(lines[1:], lines[:-1], strict=True)]


def run_marian(args: argparse.Namespace, words: int) -> dict:
    work = args.work
    log = work / "marian.log"
    log.unlink(missing_ok=True)
    command = [
        args.marian,
        "--type", "transformer",
        "--enc-depth", "3", "--dec-depth", "3",
        "--dim-emb", "256", "--transformer-dim-ffn", "1024", "--transformer-heads", "4",
        "--transformer-ffn-activation", "relu", "--transformer-dropout", "0.1", "--label-smoothing", "0.1",
        "--tied-embeddings", "--max-length", "256",
        "--train-sets", str(work / "train.en"), str(work / "train.de"),
        "--vocabs", str(work / "vocab.json"), str(work / "vocab.json"),
        "--mini-batch-words", str(words), "--maxi-batch", "100",
        "--learn-rate", "0.0005", "--lr-warmup", "4000", "--lr-decay-inv-sqrt", "4000",
        "--optimizer-params", "0.9", "0.98", "1e-09",
        "--cpu-threads", "2", "--sync-sgd",
        "--after-batches", str(args.warmup + args.updates), "--disp-freq", str(args.report_every),
        "--save-freq", "1000000", "--model", str(work / "marian" / "model.npz"), "--overwrite",
        "--seed", "1", "--log", str(log), "--quiet",
    ]  # fmt: skip
    # A model folder left by the run before would be resumed from (Marian continues a training it finds)
    shutil.rmtree(work / "marian", ignore_errors=True)
    (work / "marian").mkdir()
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return _peer_row("marian", wall, marian_intervals(log.read_text()), args.warmup)


EOLE_LINE = re.compile(r"Step\s+(\d+)/.*?bsz:\s*(\d+)/\s*(\d+)/\s*\d+;\s*(\d+)/\s*(\d+) tok/s;\s*(\d+) sec")


def eole_intervals(log: str) -> tuple[list[tuple[int, float, float]], list[int]]:
    """(update, target tokens, seconds) of each interval between two of Eole's progress lines (its tgt
    tok/s over the interval, its cumulative whole seconds), and each line's target tokens a batch."""
    intervals, batch_tgt, before = [], [], None
    for step, _src_batch, tgt_batch, _src, tgt, seconds in EOLE_LINE.findall(log):
        if before is not None:  # the first line's interval holds the start-up
            intervals.append((int(step), int(tgt) * (int(seconds) - before), int(seconds) - before))
        batch_tgt.append(int(tgt_batch))
        before = int(seconds)
    return intervals, batch_tgt


def run_eole(args: argparse.Namespace, batch_tokens: int, updates: int, warmup: int) -> dict:
    """Eole trains `updates` updates of `batch_tokens` (its own count: padded, the longer side)."""
    work = args.work
    config = {
        "overwrite": True,
        "seed": 1,
        "report_every": args.report_every,
        "src_vocab": str(work / "vocab.eole"),
        "tgt_vocab": str(work / "vocab.eole"),
        "share_vocab": True,
        "src_vocab_size": 8000,
        "tgt_vocab_size": 8000,
        "vocab_size_multiple": 1,
        "n_sample": 0,
        "data": {"corpus_1": {"path_src": str(work / "train.en"), "path_tgt": str(work / "train.de")}},
        "training": {
            "model_path": str(work / "eole-model"),
            "save_checkpoint_steps": 1000000,
            "train_steps": updates,
            "valid_steps": 1000000,
            "world_size": 1,
            "gpu_ranks": [],
            "batch_type": "tokens",
            "batch_size": batch_tokens,
            "batch_size_multiple": 1,
            "num_workers": 0,
            "accum_count": [1],
            "accum_steps": [0],
            "dropout": [0.1],
            "dropout_steps": [0],
            "attention_dropout": [0.0],
            "optim": "adam",
            "learning_rate": 2.0,
            "warmup_steps": 4000,
            "decay_method": "noam",
            "adam_beta2": 0.98,
            "label_smoothing": 0.1,
            "param_init": 0.0,
            "param_init_method": "xavier_uniform",
            "normalization": "tokens",
            "compute_dtype": "fp32",
        },
        "model": {
            "architecture": "transformer",
            "hidden_size": 256,
            "layers": 3,
            "heads": 4,
            "transformer_ff": 1024,
            "share_decoder_embeddings": True,
            "add_qkvbias": True,
            "add_ffnbias": True,
            "mlp_activation_fn": "relu",
            "embeddings": {"word_vec_size": 256, "position_encoding_type": "SinusoidalInterleaved"},
        },
    }
    (work / "eole.yaml").write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    shutil.rmtree(work / "eole-model", ignore_errors=True)  # each run starts from nothing, as Marian's
    env = {**os.environ, "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    start = time.perf_counter()
    done = subprocess.run(
        [args.eole, "train", "-config", str(work / "eole.yaml")], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - start
    (work / "eole.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode:
        raise SystemExit(f"bench_peers: eole failed ({done.returncode}); see {work / 'eole.log'}")
    intervals, batch_tgt = eole_intervals(done.stdout + done.stderr)
    row = _peer_row("eole", wall, intervals, warmup)
    return {**row, "batch_size": batch_tokens, "real_tgt_tokens_per_update": round(sum(batch_tgt) / len(batch_tgt), 1)}


def calibrate_eole(args: argparse.Namespace, words: int) -> int:
    """Eole's batch_size that gives about `words` real target tokens an update (as seq2seq's and
    Marian's): Eole counts a batch's tokens its own way, so a short run at 4,096 measures the ratio."""
    probe = run_eole(args, 4096, updates=4 * args.report_every, warmup=args.report_every)
    return round(4096 * words / probe["real_tgt_tokens_per_update"])


def _peer_row(tool: str, wall: float, intervals: list[tuple[int, float, float]], warmup: int) -> dict:
    """A peer's rate over its intervals (update, target tokens, seconds) that end after `warmup`."""
    timed = [(n, t) for u, n, t in intervals if u > warmup]
    if not timed:
        raise SystemExit(f"bench_peers: {tool} printed no progress after update {warmup}")
    seconds = sum(t for _, t in timed)
    return {
        "tool": tool,
        "wall_s": round(wall, 1),
        "tgt_tokens_per_s": round(sum(n for n, _ in timed) / seconds, 1),
        "timed_seconds": round(seconds, 1),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--marian", required=True, help="the marian executable")
    parser.add_argument("--eole", required=True, help="the eole command, from Eole's own environment")
    parser.add_argument("--work", default="/tmp/seq2seq-bench-peers", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=10, help="updates not timed")
    parser.add_argument("--updates", type=int, default=60, help="updates timed")
    parser.add_argument("--report-every", type=int, default=10, help="the peers' progress lines")
    parser.add_argument("--compiled", action="store_true", help="also seq2seq's compile=true, after its eager run")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="also seq2seq compile=true under torchrun, this many processes of 1 thread",
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.set_num_threads(2)
    tokens = export_corpus(["model=small", "data=multi30k", f"data.dir={args.data_dir}"], args.work)
    runs, words, flops_per_tgt, eole_batch = [], 0, 0.0, 0
    for round_index in range(args.rounds):
        row = run_seq2seq(args)
        if not words:  # the first seq2seq run sets the peers' batch and the FLOPs of a target token
            words = round(row["real_tgt_tokens_per_update"])
            flops_per_tgt = row["model_gflops_per_s"] * 1e9 / row["tgt_tokens_per_s"]
        runs.append({"round": round_index, **row})
        if args.compiled:
            runs.append({"round": round_index, **run_seq2seq(args, compiled=True)})
        if args.processes > 1:
            runs.append({"round": round_index, **run_seq2seq(args, compiled=True, processes=args.processes)})
        runs.append({"round": round_index, **with_gemm_share(run_marian(args, words), flops_per_tgt)})
        write_report(args, tokens, words, eole_batch, flops_per_tgt, runs)
        eole_batch = eole_batch or calibrate_eole(args, words)
        eole = run_eole(args, eole_batch, args.warmup + args.updates, args.warmup)
        runs.append({"round": round_index, **with_gemm_share(eole, flops_per_tgt)})
        write_report(args, tokens, words, eole_batch, flops_per_tgt, runs)


def with_gemm_share(row: dict, flops_per_tgt: float) -> dict:
    """A peer's row with its model GFLOP/s and their share of the GEMM rate measured now, right after it."""
    gemm = matmul_peak_gflops(2.0)
    achieved = row["tgt_tokens_per_s"] * flops_per_tgt / 1e9
    return {
        **row,
        "model_gflops_per_s": round(achieved, 1),
        "gemm_gflops_per_s": round(gemm, 1),
        "share_of_gemm_rate": round(achieved / gemm, 3),
    }


def write_report(
    args: argparse.Namespace,
    tokens: dict[str, float],
    words: int,
    eole_batch: int,
    flops_per_tgt: float,
    runs: list[dict],
) -> None:
    """The report so far (after every peer run, so that a failure later in the window keeps it)."""
    by_tool: dict[str, list[float]] = {}
    for row in runs:
        by_tool.setdefault(row["tool"], []).append(row["tgt_tokens_per_s"])
    report = {
        "what": "target tokens/s training the same small Transformer on the same tokens, rounds A, B, C",
        "model": "3+3 layers, d_model 256, 4 heads, FFN 1024, tied target embedding, fp32, 2 threads",
        "corpus": "Multi30k en-de train as seq2seq tokenizes it (joint BPE 8k)",
        "marian_batch_words": words,
        "eole_batch_size": eole_batch,
        "src_tokens_per_tgt_token": round(tokens["en"] / tokens["de"], 4),
        "model_gflop_per_target_token": round(flops_per_tgt / 1e9, 6),
        "differences": DIFFERENCES,
        "runs": runs,
        "tgt_tokens_per_s_by_tool": by_tool,
        "ratios_by_round": {
            f"{ours} / {peer}": [round(a / b, 3) for a, b in zip(by_tool[ours], by_tool.get(peer, []), strict=False)]
            for ours in by_tool
            if ours.startswith("seq2seq")
            for peer in ("marian", "eole")
        },
        "machine": machine_info(),
    }
    write_json_report(report, args.json)


if __name__ == "__main__":
    main()
