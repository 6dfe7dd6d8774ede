"""What a decoding command decodes with, decided once where its config is read: a `DecodingJob`, the
resolved model, one `DecodingSettings`, the `EngineOptions` and the engine asked for, frozen.

`decoding_job(cfg)` is the one builder: seq2seq-translate and seq2seq-serve call it in cli/ on their
config, the Python API's loaders (translator_api.decoding_config's keywords) on theirs, so a setting is
checked, and a model's files read, the same way and once. Below it nothing reads a config: the engine
choice, the loaders and the engines take the job's parts. seq2seq-translate's `TranslatePlan` adds its
files to the job. No torch here: the commands build their plan before it loads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from seq2seq.config import validate_translate
from seq2seq.inference.resolved_model import ResolvedModel, resolve
from seq2seq.inference.settings import DecodingSettings, EngineOptions


@dataclass(frozen=True)
class DecodingJob:
    model: ResolvedModel  # what run= and checkpoint= name, read from the disk once
    settings: DecodingSettings  # how to decode: the engines take them per call (decoding_with)
    options: EngineOptions  # device, threads, precision: fixed at load
    engine: str = "auto"  # auto | torch | ctranslate2: choice.py decides on the rest of the job
    # attention=: seq2seq-translate's heatmaps, which only PyTorch draws (so they decide the engine too).
    attention: str | None = None


def decoding_job(cfg: Any) -> DecodingJob:
    """The job of a translate config (a TranslateConfig or the command's DictConfig of one; a server's
    is config.serve_translate_config's): validated once, its model resolved."""
    validate_translate(cfg)

    def keys(part: type) -> dict[str, Any]:  # each of its fields is the config's key of that name
        return {field.name: getattr(cfg, field.name) for field in fields(part)}

    return DecodingJob(
        resolve(cfg.run, cfg.checkpoint),
        DecodingSettings(**keys(DecodingSettings)),
        EngineOptions(**keys(EngineOptions)),
        engine=cfg.engine,
        attention=cfg.attention,
    )


@dataclass(frozen=True)
class TranslatePlan:
    """seq2seq-translate's work: the job, and the files it reads and writes (cli/translate.py builds it)."""

    job: DecodingJob
    input: str = "-"  # a file of lines; - is stdin
    output: str = "-"  # - is stdout
    replace_output: bool = False  # replace output= although this command did not write it
    reference: str | None = None  # reference translations: BLEU and chrF on stderr
