"""Translate with a CTranslate2 model directory written by `seq2seq-export format=ctranslate2`: a Unix
filter, one output line per input line.

    python scripts/translate_ctranslate2.py model-ct2 --beam 5 < test.en > hyp.de

Kept for its command lines (the benchmarks call it): it is `seq2seq-translate checkpoint=model-ct2
engine=ctranslate2 device=cpu`, the package's CTranslate2 engine and its decoding rules
(seq2seq/inference/ctranslate2_engine.py), which import no torch. The model's max_positions comes
from the seq2seq.json that the export writes beside model.bin.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from seq2seq.cli.common import report_errors
from seq2seq.config import TranslateConfig

# --compute-type as CTranslate2 names it -> precision= as seq2seq-translate names it.
PRECISIONS = {"default": "auto", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a directory written by seq2seq-export format=ctranslate2")
    parser.add_argument("--beam", type=int, default=TranslateConfig.beam)
    parser.add_argument("--length-penalty", type=float, default=TranslateConfig.length_penalty)
    parser.add_argument("--max-len-a", type=float, default=TranslateConfig.max_len_a)
    parser.add_argument("--max-len-b", type=int, default=TranslateConfig.max_len_b)
    parser.add_argument("--max-positions", type=int, help="ignored: read from the export's seq2seq.json")
    parser.add_argument("--batch-size", type=int, default=TranslateConfig.batch_size)
    parser.add_argument("--threads", type=int, default=0, help="0: CTranslate2's default")
    parser.add_argument("--compute-type", default="default", choices=PRECISIONS, help="default: as exported")
    args = parser.parse_args()
    if not (args.model / "model.bin").is_file():
        raise SystemExit(f"error: {args.model}: no model.bin (write one with seq2seq-export format=ctranslate2)")
    if args.max_positions is not None:
        print(f"warning: --max-positions is ignored: {args.model / 'seq2seq.json'} gives it", file=sys.stderr)
    cfg = TranslateConfig(
        checkpoint=str(args.model),
        engine="ctranslate2",
        device="cpu",
        beam=args.beam,
        length_penalty=args.length_penalty,
        max_len_a=args.max_len_a,
        max_len_b=args.max_len_b,
        batch_size=args.batch_size,
        threads=args.threads or None,
        precision=PRECISIONS[args.compute_type],
    )
    # Warnings only (a line cut to the model's positions, undecodable input), as seq2seq-translate words them.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="[%(levelname)s] %(message)s")
    from seq2seq.cli.translate import translate  # after the arguments: --help answers at once

    report_errors(lambda: translate(OmegaConf.structured(cfg)), debug=False)


if __name__ == "__main__":
    main()
