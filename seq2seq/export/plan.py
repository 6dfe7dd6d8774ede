"""seq2seq-export's plan: what cli/export.py's `export_plan` builds of the command line once, checked
(config.validate_export), and the only thing `export` (command.py) is handed. No torch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportPlan:
    """What seq2seq-export writes, as cli/export.py's `export_plan` checked it (validate_export)."""

    output: Path  # a new directory (an .argosmodel file for format=argos)
    format: str  # safetensors | ctranslate2 | huggingface | argos
    run: str | None = None  # its best checkpoint, else its last, unless checkpoint= names one
    checkpoint: str | None = None
    quantization: str | None = None  # ctranslate2 and argos
    src_lang: str | None = None  # argos: the direction of a multilingual run packaged
    tgt_lang: str | None = None
