"""Decoding speed of a trained run on a GPU, each engine and precision; prints one JSON object.

    python scripts/bench_translate_gpu.py --run outputs/reproduce/multi30k_en_de_gpu \
        --input data/multi30k/test_2016_flickr.en.gz --reference data/multi30k/test_2016_flickr.de.gz

In process, after one untimed pass over the first --warmup lines (CUDA kernels load and cuBLAS picks
its algorithms then): sentences/s and seconds for the whole file at --beam, its BLEU, and the share of
lines equal to PyTorch fp32's, for PyTorch in fp32/bf16/fp16 and the run's CTranslate2 export in
fp32 and int8. A row that cannot run says why instead (e.g. a CTranslate2 wheel built for another
CUDA's cuBLAS). Run it on an idle GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import sacrebleu
import torch

from seq2seq.config import UserError
from seq2seq.data.corpus import read_lines
from seq2seq.inference.ctranslate2_engine import CTranslate2Translator
from seq2seq.inference.translator import Translator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

# CTranslate2 decodes the run's export in fp32 only (seq2seq-translate refuses fp16/bf16 there: its lines
# would differ from PyTorch's); int8 is its own.
ROWS = [("torch", "fp32"), ("torch", "bf16"), ("torch", "fp16"), ("ctranslate2", "fp32"), ("ctranslate2", "int8")]


def load(engine: str, run: str, precision: str, beam: int, batch_size: int, device: str):
    settings = dict(beam=beam, precision=precision, device=device, batch_size=batch_size)
    return (Translator if engine == "torch" else CTranslate2Translator).load(run, **settings)


def timed(translator, lines: list[str], device: str) -> tuple[list[str], float]:
    synchronize(device)
    start = time.perf_counter()
    out = translator.translate(lines)
    synchronize(device)  # CTranslate2 returns finished lines; PyTorch's last batch is read back too
    return out, time.perf_counter() - start


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=128, help="lines decoded untimed first")
    parser.add_argument("--device", default="cuda", help="cuda (what it is for) or cpu (to check the script)")
    parser.add_argument("--lines", type=int, help="only the first N lines (check_gpu.sh's dry run)")
    parser.add_argument("--report", help="also write the report here, rewritten after every row")
    args = parser.parse_args()
    source, reference = list(read_lines(args.input))[: args.lines], list(read_lines(args.reference))[: args.lines]
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else None
    report = {"gpu": gpu, "device": args.device, "run": args.run, "rows": [], "machine": machine_info()}

    rows, baseline = report["rows"], None
    for engine, precision in ROWS:
        row: dict[str, object] = {"engine": engine, "precision": precision, "beam": args.beam}
        try:
            translator = load(engine, args.run, precision, args.beam, args.batch_size, args.device)
            translator.translate(source[: args.warmup])
            out, seconds = timed(translator, source, args.device)
        except (UserError, RuntimeError, ValueError) as err:
            rows.append({**row, "error": str(err).splitlines()[0][:300]})
            continue
        baseline = baseline if baseline is not None else out  # the first row: PyTorch fp32
        row.update(
            sentences=len(source),
            seconds=round(seconds, 3),
            sentences_per_s=round(len(source) / seconds, 1),
            bleu=round(sacrebleu.corpus_bleu(out, [reference]).score, 2),
            bleu_lowercase=round(sacrebleu.corpus_bleu(out, [reference], lowercase=True).score, 2),
            same_as_torch_fp32=round(sum(a == b for a, b in zip(out, baseline, strict=True)) / len(out), 4),
        )
        rows.append(row)
        del translator
        if args.report:  # a process stopped at a loan's limit keeps the rows it measured
            Path(args.report).write_text(json.dumps(report, indent=2))
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
