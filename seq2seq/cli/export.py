"""`seq2seq-export`: a run's checkpoint as inference files (safetensors, or a CTranslate2 model).

Takes `key=value` arguments like the other commands (checked against `seq2seq.config.ExportConfig`),
but without Hydra's run directory or logging: it only reads a checkpoint and writes one directory.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from seq2seq.export.plan import ExportPlan

USAGE = """\
usage: seq2seq-export run=<run dir> | checkpoint=<file.pt>  output=<new dir>  [format=safetensors|ctranslate2|huggingface|argos]
                      [quantization=int8|int8_float32|float16|bfloat16|...]  (ctranslate2 and argos; default fp32)

  format=safetensors   <output>/model.safetensors + config.json + tokenizer file(s)
  format=ctranslate2   a CTranslate2 model directory + tokenizer file(s)
  format=huggingface   a MarianMTModel directory (post-norm models) + tokenizer + model card (README.md);
                       load with transformers.AutoModelForSeq2SeqLM / AutoTokenizer (docs/huggingface.md)
  format=argos         output=<name>.argosmodel: an Argos Translate package (data.tokenizer=sentencepiece runs)
translate safetensors or ctranslate2 with: seq2seq-translate checkpoint=<output> < input.txt > output.txt
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
    from seq2seq.artifacts.path_kind import check_named_models_exist
    from seq2seq.config import validate_export
    from seq2seq.startup import prepare_process
    from seq2seq.stop_signals import stop_signals_raise

    cfg = parse_arguments(argv)
    validate_export(cfg)  # before torch: a bad setting is one line at once
    check_named_models_exist([cfg.run], cfg.checkpoint)  # and so is a path typed wrong
    prepare_process()
    from seq2seq.export.command import export  # torch: only once the command line is known to be good

    with stop_signals_raise():  # SIGTERM mid-write: the staging directory beside output= goes too
        output, model_cfg = export(export_plan(cfg))
    if cfg.format == "argos":
        print(f"wrote {output} (argos, {output.stat().st_size / 1e6:.1f} MB)")
        install = f"import argostranslate.package as p; p.install_from_path({json.dumps(str(output))})"
        from seq2seq.artifacts.argos import install_directory

        where = f"Argos installs into {install_directory()}; ARGOS_PACKAGES_DIR sets the folder"
        print(f"install with: python -c {shlex.quote(install)} ({where}; docs/export.md)")
        return
    files = sorted(p.name for p in output.iterdir())
    size = sum(p.stat().st_size for p in output.iterdir()) / 1e6
    print(f"wrote {output} ({cfg.format}, {size:.1f} MB): {', '.join(files)}")
    if cfg.format == "huggingface":
        print(
            f"load with: transformers.AutoModelForSeq2SeqLM.from_pretrained({str(output)!r}) and "
            f"AutoTokenizer.from_pretrained({str(output)!r}) (docs/huggingface.md)"
        )
        if not (output / "source.spm").is_file():  # what a Marian model's own tools expect
            print(
                "byte-level tokenizer: ct2-transformers-converter and init_from= take a run trained with "
                "data.tokenizer=sentencepiece; format=ctranslate2 is this run's CTranslate2 export"
            )
        return
    # A command to paste into a shell, for either format: seq2seq-translate decodes a CTranslate2
    # export with CTranslate2 itself (docs/export.md shows the calls for CTranslate2 alone).
    from seq2seq.inference.target_language import translate_command

    print(f"translate with: {translate_command('checkpoint', output, _recorded_data(output))}")
    if cfg.format == "ctranslate2":
        print(f"model.max_positions={model_cfg.max_positions} (CTranslate2 alone: max_input_length)")


def _recorded_data(output: Any) -> dict | None:
    """The languages an export recorded (its "data": a multilingual model's directions), from the
    CTranslate2 export's seq2seq.json or the weights export's config.json."""
    from seq2seq.artifacts.path_kind import DECODING_FILE, WEIGHTS_CONFIG

    for name in (DECODING_FILE, WEIGHTS_CONFIG):
        try:
            data = json.loads((output / name).read_text(encoding="utf-8")).get("data")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(data, dict):
            return data
    return None


def parse_arguments(argv: list[str]) -> object:
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import ExportConfig

    return parse_key_values(argv, ExportConfig)


def export_plan(cfg: Any) -> ExportPlan:
    """seq2seq-export's plan of a config (an ExportConfig or its DictConfig), checked: what `export`
    writes. The Python API's callers come here too; the command has checked it already."""
    from seq2seq.config import validate_export
    from seq2seq.export.plan import ExportPlan

    validate_export(cfg)
    return ExportPlan(
        output=Path(cfg.output),
        format=cfg.format,
        run=cfg.run,
        checkpoint=cfg.checkpoint,
        quantization=cfg.quantization,
        src_lang=cfg.src_lang,
        tgt_lang=cfg.tgt_lang,
    )


if __name__ == "__main__":
    main()
