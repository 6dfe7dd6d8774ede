"""`seq2seq-export`: a run's checkpoint as inference files (safetensors, or a CTranslate2 model).

Takes `key=value` arguments like the other commands (checked against `seq2seq.inference.export.ExportConfig`),
but without Hydra's run directory or logging: it only reads a checkpoint and writes one directory.
"""

from __future__ import annotations

import sys

USAGE = """\
usage: seq2seq-export run=<run dir> | checkpoint=<file.pt>  output=<new dir>  [format=safetensors|ctranslate2|huggingface]
                      [quantization=int8|int8_float32|float16|bfloat16|...]  (ctranslate2 only; default fp32)

  format=safetensors   <output>/model.safetensors + config.json + tokenizer file(s);
                       translate with: seq2seq-translate checkpoint=<output>
  format=ctranslate2   a CTranslate2 model directory + tokenizer file(s);
                       translate with ctranslate2.Translator(<output>) (see README)
  format=huggingface   a MarianMTModel directory (post-norm models) + tokenizer + model card (README.md);
                       load with transformers.AutoModelForSeq2SeqLM / AutoTokenizer (docs/huggingface.md)
"""


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print(USAGE, end="")
        return
    if not argv:  # nothing to export: say how, and fail like any other bad command line
        print(USAGE, end="", file=sys.stderr)
        sys.exit(2)
    from seq2seq.cli.common import report_errors

    report_errors(lambda: _run(argv), "debug=true" in argv)


def _run(argv: list[str]) -> None:
    from seq2seq.inference.export import export

    cfg = parse_arguments(argv)
    output, model_cfg = export(cfg)
    files = sorted(p.name for p in output.iterdir())
    size = sum(p.stat().st_size for p in output.iterdir()) / 1e6
    print(f"wrote {output} ({cfg.format}, {size:.1f} MB): {', '.join(files)}")
    if cfg.format == "safetensors":
        print(f"translate with: seq2seq-translate checkpoint={output}")
    elif cfg.format == "huggingface":
        print(
            f"load with: transformers.AutoModelForSeq2SeqLM.from_pretrained({str(output)!r}) and "
            f"AutoTokenizer.from_pretrained({str(output)!r}) (docs/huggingface.md)"
        )
    else:
        positions = model_cfg.max_positions
        print(
            f"translate with: ctranslate2.Translator({str(output)!r}).translate_batch(tokens, beam_size=..., "
            f"min_decoding_length=0, max_input_length={positions}, max_decoding_length=<at most {positions - 1}>) "
            "(see README)"
        )


def parse_arguments(argv: list[str]) -> object:
    from seq2seq.cli.common import parse_key_values
    from seq2seq.inference.export import ExportConfig

    return parse_key_values(argv, ExportConfig)


if __name__ == "__main__":
    main()
