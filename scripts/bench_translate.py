"""Decoding speed and quality of a trained run on a test set; prints one JSON object.

    python scripts/bench_translate.py --run outputs/reproduce/multi30k_en_de \
        --input data/multi30k/test_2016_flickr.en.gz --reference data/multi30k/test_2016_flickr.de.gz

End to end: `seq2seq-translate` in a subprocess, process start to last line written, and the time to
its first output line, for greedy and beam 5: as a user runs it (`run=`: the run's CTranslate2 export
where it has one, see seq2seq/inference/choice.py; the row names the engine) and on PyTorch
(`engine=torch`). In process (PyTorch): sentences/s and output tokens/s for each
beam size and batch size, decode time per sentence by source-length bucket, BLEU of each output,
agreement of the cached fast path with a simple decoder that re-runs the whole prefix at every step,
and optionally dynamic int8 quantisation of the Linear layers. With `--ctranslate2 <export dir>`, the
CTranslate2 export of the same checkpoint is also timed given by hand (scripts/translate_ctranslate2.py),
round by round beside ours, and in process (`CTranslate2Translator`, the in-process rows' settings); with
`--int8`, the command with `precision=int8` (CTranslate2's 8-bit weights). Every row has its BLEU and the
fraction of lines equal to PyTorch's. Run it on an idle machine.
"""

from __future__ import annotations

import sys

from seq2seq.allocator import relaunch_with_tcmalloc

relaunch_with_tcmalloc("bench_translate.py", __name__)  # in process too, what seq2seq-translate runs on

from seq2seq.startup import prepare_process  # noqa: E402

prepare_process()  # before torch and ctranslate2 load, as seq2seq-translate does

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import sacrebleu  # noqa: E402
import torch  # noqa: E402

from seq2seq.config import TranslateConfig  # noqa: E402
from seq2seq.data.corpus import read_lines  # noqa: E402
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from seq2seq.inference.ctranslate2_engine import CTranslate2Translator  # noqa: E402
from seq2seq.inference.job import decoding_job  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.inference.translator_api import output_budget  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

BUCKETS = [(5, 10), (10, 20), (20, 40), (40, 80)]


def run_filter(command: list[str], source: list[str]) -> tuple[list[str], float, float, str]:
    """Runs a translation filter; its output lines, wall time (process start to last line), the time
    its first output line arrived, and its log."""
    with tempfile.TemporaryFile("w+") as log:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        process.stdin.write("\n".join(source) + "\n")
        process.stdin.close()
        first_line = process.stdout.readline()
        first = time.perf_counter() - start
        rest = process.stdout.read()
        process.wait()
        total = time.perf_counter() - start
        log.seek(0)
        stderr = log.read()
    if process.returncode != 0:
        raise SystemExit(f"error: {' '.join(command)} exited with status {process.returncode}: {stderr[-500:]}")
    return (first_line + rest).splitlines(), total, first, stderr


def scores(hypotheses: list[str], reference: list[str]) -> dict[str, float]:
    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [reference]).score, 2),
        "bleu_lc": round(sacrebleu.corpus_bleu(hypotheses, [reference], lowercase=True).score, 2),
    }


def filter_row(command: list[str], beam: int, source: list[str], reference: list[str]) -> dict:
    """A translation command's row: wall time, first line, scores, and its hypotheses."""
    hypotheses, total, first, log = run_filter(command, source)
    row = {"beam": beam, "wall_s": round(total, 2), "first_line_s": round(first, 2), "lines": len(hypotheses)}
    engine = [line.split("engine: ", 1)[1] for line in log.splitlines() if "engine: " in line]
    if engine:  # seq2seq-translate logs which engine decoded and why
        row["engine"] = engine[0]
    return {**row, **scores(hypotheses, reference), "hypotheses": hypotheses}


def end_to_end(
    args: argparse.Namespace,
    beam: int,
    source: list[str],
    reference: list[str],
    engine: str = "auto",
    precision: str | None = None,
) -> dict:
    """The real command, process start to last line written, and when its first output line arrived."""
    command = [str(Path(sys.executable).parent / "seq2seq-translate"), f"run={args.run}", f"beam={beam}"]
    command += [f"threads={args.threads}", f"precision={precision or args.precision}", f"engine={engine}"]
    return filter_row(command, beam, source, reference)


def end_to_end_ctranslate2(args: argparse.Namespace, beam: int, source: list[str], reference: list[str]) -> dict:
    """The same, with the CTranslate2 export of the same checkpoint given by hand (scripts/translate_ctranslate2.py)."""
    command = [sys.executable, str(Path(__file__).resolve().parent / "translate_ctranslate2.py"), args.ctranslate2]
    command += [f"--beam={beam}", f"--threads={args.threads}", f"--compute-type={args.ct2_compute_type}"]
    return filter_row(command, beam, source, reference)


def timed_translation(translator: Translator | CTranslate2Translator, lines: list[str]) -> tuple[list[str], float]:
    start = time.perf_counter()
    hypotheses = translator.translate(lines)
    return hypotheses, time.perf_counter() - start


@torch.inference_mode()
def simple_greedy(translator: Translator, lines: list[str]) -> list[str]:
    """The reference decoder: one sentence at a time, the whole prefix re-run at every step, no cache,
    in fp32 whatever the precision benchmarked."""
    model, outputs = copy.deepcopy(translator.model).float(), []
    for ids in translator.encode(lines):
        src = torch.tensor([ids])
        memory, src_mask = model.encode(src)
        limit = output_budget(
            len(ids) - 1, 0, translator.settings.max_len_a, translator.settings.max_len_b, translator.max_positions
        )
        prefix = [BOS_ID]
        for _ in range(limit):
            hidden = model.decode(torch.tensor([prefix]), memory, src_mask)
            log_probs = torch.log_softmax(model.output(hidden[:, -1]).float(), dim=-1)[0]
            log_probs[[PAD_ID, BOS_ID]] = float("-inf")
            if len(prefix) == limit:
                break
            token = int(log_probs.argmax())
            if token == EOS_ID:
                break
            prefix.append(token)
        outputs.append(translator.tokenizers.decode_tgt([prefix[1:]])[0])
    return outputs


def in_process_ctranslate2(args: argparse.Namespace, source: list[str], reference: list[str]) -> list[dict]:
    rows = []
    for beam in (int(b) for b in args.beams.split(",")):
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            translator = CTranslate2Translator.load(
                args.ctranslate2, beam=beam, batch_size=batch_size, threads=args.threads, device="cpu"
            )
            hypotheses, seconds = timed_translation(translator, source)
            bleu = sacrebleu.corpus_bleu(hypotheses, [reference]).score
            rows.append({"beam": beam, "batch_size": batch_size, "seconds": round(seconds, 2), "bleu": round(bleu, 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--precision", default="auto", help="auto, fp32 or bf16 (the weights' type), as in seq2seq-translate"
    )
    parser.add_argument("--beams", default="1,2,5,10")
    parser.add_argument("--batch-sizes", default="16,64,128")
    parser.add_argument("--quantize", action="store_true", help="also measure dynamic int8 Linear layers")
    parser.add_argument("--int8", action="store_true", help="also time seq2seq-translate run= precision=int8")
    parser.add_argument("--rounds", type=int, default=1, help="end-to-end rounds (A/B/A/B with --ctranslate2)")
    parser.add_argument(
        "--ctranslate2", help="a seq2seq-export format=ctranslate2 directory of the same checkpoint: timed beside ours"
    )
    parser.add_argument("--ct2-compute-type", default="float32", help="CTranslate2's compute_type (float32: as ours)")
    parser.add_argument("--limit", type=int, help="only the first N sentences (a quick check of the script)")
    parser.add_argument("--check-sentences", type=int, default=100, help="sentences compared with the simple decoder")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    source, reference = read_lines(args.input)[: args.limit], read_lines(args.reference)[: args.limit]
    report: dict[str, object] = {
        "run": args.run,
        "sentences": len(source),
        "precision": args.precision,  # replaced below by what it meant on this machine
        "machine": machine_info(),
    }
    rounds = []
    for _ in range(args.rounds):  # A/B/A/B: the machine's speed drifts between runs
        for beam in (1, 5):
            rounds.append(("end_to_end", end_to_end(args, beam, source, reference)))
            rounds.append(("end_to_end_pytorch", end_to_end(args, beam, source, reference, engine="torch")))
            if args.ctranslate2:
                rounds.append(("ctranslate2_end_to_end", end_to_end_ctranslate2(args, beam, source, reference)))
            if args.int8:
                rounds.append(("end_to_end_int8", end_to_end(args, beam, source, reference, precision="int8")))
    pytorch = {row["beam"]: row["hypotheses"] for kind, row in rounds if kind == "end_to_end_pytorch"}
    for kind, row in rounds:
        if kind != "end_to_end_pytorch":  # lines equal to PyTorch's: what the other engines promise
            same = sum(a == b for a, b in zip(row["hypotheses"], pytorch[row["beam"]], strict=True))
            row["same_as_pytorch"] = round(same / len(source), 4)
    for kind in ("end_to_end", "end_to_end_pytorch", "ctranslate2_end_to_end", "end_to_end_int8"):
        if any(k == kind for k, _ in rounds):
            report[kind] = [row for k, row in rounds if k == kind]
    for _, row in rounds:
        del row["hypotheses"]

    start = time.perf_counter()
    loaded = Translator.from_job(
        decoding_job(TranslateConfig(run=args.run, beam=1, precision=args.precision, device="cpu"))
    )
    translator = loaded
    report["load_s"] = round(time.perf_counter() - start, 2)
    report["precision"] = {torch.float32: "fp32", torch.bfloat16: "bf16"}[translator.model.output.weight.dtype]
    rows = []
    for beam in (int(b) for b in args.beams.split(",")):
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            translator = loaded.decoding_with(replace(loaded.settings, beam=beam, batch_size=batch_size))
            hypotheses, seconds = timed_translation(translator, source)
            tokens = sum(len(t) for t in translator.tokenizers.encode_tgt(hypotheses))
            bleu = sacrebleu.corpus_bleu(hypotheses, [reference]).score
            rows.append(
                {
                    "beam": beam,
                    "batch_size": batch_size,
                    "seconds": round(seconds, 2),
                    "sentences_per_s": round(len(source) / seconds, 1),
                    "tokens_per_s": round(tokens / seconds, 1),
                    "bleu": round(bleu, 2),
                }
            )
    report["in_process"] = rows
    if args.ctranslate2:  # the same rows on the CTranslate2 engine that seq2seq-translate runs by default
        report["ctranslate2_in_process"] = in_process_ctranslate2(args, source, reference)

    lengths = [len(ids) for ids in translator.tokenizers.encode_src(source)]
    by_length = []
    for low, high in BUCKETS:
        bucket = [line for line, n in zip(source, lengths, strict=True) if low <= n < high]
        if not bucket:
            continue
        for beam in (1, 5):
            translator = loaded.decoding_with(replace(loaded.settings, beam=beam))
            _, seconds = timed_translation(translator, bucket)
            by_length.append(
                {
                    "source_tokens": f"{low}-{high}",
                    "beam": beam,
                    "sentences": len(bucket),
                    "ms_per_sentence": round(1000 * seconds / len(bucket), 2),
                }
            )
    report["by_source_length"] = by_length

    translator = loaded
    fast, _ = timed_translation(translator, source[: args.check_sentences])
    simple = simple_greedy(translator, source[: args.check_sentences])
    report["cached_vs_simple_identical"] = sum(a == b for a, b in zip(fast, simple, strict=True)) / len(simple)

    if args.quantize:
        loaded.model = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(loaded.model).float(), {torch.nn.Linear}, dtype=torch.qint8
        )
        quantized = []
        for beam in (1, 5):
            translator = loaded.decoding_with(replace(loaded.settings, beam=beam))
            hypotheses, seconds = timed_translation(translator, source)
            quantized.append(
                {
                    "beam": beam,
                    "seconds": round(seconds, 2),
                    "bleu": round(sacrebleu.corpus_bleu(hypotheses, [reference]).score, 2),
                }
            )
        report["int8_dynamic"] = quantized
    report["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
