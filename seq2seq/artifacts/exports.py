"""`export(plan)`, the work of `seq2seq-export`: a training checkpoint as files for inference only, in
one of the formats of this package: safetensors (safetensors.py), ctranslate2 (ctranslate2_model.py),
huggingface (a MarianMTModel directory, marian.py) or argos (an .argosmodel package, argos.py).
`seq2seq-translate checkpoint=<output>` translates a safetensors or ctranslate2 export.
`write_run_exports` writes what training leaves in a run for translation: model/ and ctranslate2/.

The output directory is written under a temporary name beside it and renamed at the end, so a
failure leaves nothing behind; an existing output directory is refused.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.artifacts.checkpoint import check_vocabulary, current_umask, load_checkpoint, model_config_of
from seq2seq.artifacts.ctranslate2_model import ctranslate2_writer
from seq2seq.artifacts.model_files import load_tokenizers
from seq2seq.artifacts.replacing import check_new, new_output, remove_folder_leftovers, replaced_folder
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, INFERENCE_DIR, RunDir
from seq2seq.artifacts.safetensors import safetensors_writer
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.fairseq_vocab import FairseqTokenizers
from seq2seq.data.sentencepiece import SentencePieceTokenizers
from seq2seq.data.tokenizer import Tokenizers

COMMAND = "seq2seq-export"


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


def export(plan: ExportPlan) -> tuple[Path, ModelConfig]:
    """Writes the export `plan` describes; returns its directory and the model's config."""
    output = plan.output
    check_new(output, "output")  # before the checkpoint is read: a wrong output= costs nothing
    path = Path(plan.checkpoint) if plan.checkpoint else RunDir(plan.run).find_checkpoint()
    payload = load_checkpoint(path)
    tokenizers = load_tokenizers(path, plan.run, payload.get("config", {}).get("data"))
    model_cfg = _model_config(payload, path)
    check_vocabulary(payload, tokenizers, path)
    if plan.format == "huggingface" and isinstance(tokenizers, FairseqTokenizers):  # NLLB-200, M2M-100, mBART-50
        from seq2seq.artifacts import m2m100, mbart

        if model_cfg.embedding_norm:  # mBART-50's layernorm_embedding
            card = m2m100.model_card(payload, mbart.MODEL_TYPE, mbart.CODES)
            write_all = m2m100.huggingface_writer(payload, model_cfg, tokenizers, path, card, mbart.MBART)
        else:
            write_all = m2m100.huggingface_writer(payload, model_cfg, tokenizers, path, m2m100.model_card(payload))
    elif plan.format == "huggingface":  # a writer of its own: transformers writes the tokenizer files
        from seq2seq.artifacts.marian import huggingface_writer, model_card

        card = model_card(payload, plan.run or str(path.parent.parent), isinstance(tokenizers, SentencePieceTokenizers))
        write_all = huggingface_writer(payload, model_cfg, tokenizers, path, card)
    elif plan.format == "argos" and isinstance(tokenizers, FairseqTokenizers):
        raise UserError(
            f"{path}: format=argos: an NLLB-200/M2M-100/mBART-50 model (its own vocabulary of all its languages, "
            "its decoder starting from </s>) is no Argos package; distil it into one: seq2seq-distill teacher=<run>"
        )
    elif plan.format == "argos":  # one file, not a directory
        from seq2seq.artifacts.argos import argos_writer

        model = functools.partial(
            ctranslate2_writer, payload, model_cfg, tokenizers, path, plan.quantization, without_pad=True
        )
        with new_output(output, "output", COMMAND, folder=False) as staging:  # one export per output at a time
            argos_writer(payload, tokenizers, path, model, plan.src_lang, plan.tgt_lang)(staging, output)
        return output, model_cfg
    else:
        write_all = _writer(plan.format, payload, model_cfg, tokenizers, path, plan.quantization)
    _write_directory(output, write_all)
    return output, model_cfg


# What training writes into its run directory at the end, for translation: directory name -> format.
RUN_EXPORTS = {INFERENCE_DIR: "safetensors", CTRANSLATE2_DIR: "ctranslate2"}


def remove_stale_export_directories(run_dir: Path) -> int:
    """Deletes what killed exports left beside a run's model/ and ctranslate2/ (their .NAME.*.tmp
    staging and .NAME.*.old directories); returns their total size. Only while holding the run's lock."""
    return sum(remove_folder_leftovers(run_dir / name) for name in RUN_EXPORTS)


def write_run_exports(run_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, Path | UserError]:
    """<run>/model/ (the weights alone, which `seq2seq-translate run=` loads instead of the checkpoint)
    and, when the ctranslate2 package is installed, <run>/ctranslate2/ (`seq2seq-translate
    checkpoint=<run>/ctranslate2`), both of the run's best checkpoint (else its last), read once. Each
    replaces an earlier one (a resumed run): the new directory is complete before the old one goes.
    Returns each export's directory, or the error that stopped it (the others are still written);
    those named in `skip` are left as they are."""
    remove_stale_export_directories(run_dir)
    path = RunDir(run_dir).find_checkpoint()
    payload = load_checkpoint(path)
    tokenizers = load_tokenizers(path, str(run_dir), payload.get("config", {}).get("data"))
    model_cfg = _model_config(payload, path)
    written: dict[str, Path | UserError] = {}
    for name, fmt in RUN_EXPORTS.items():
        if name in skip:
            continue
        if fmt == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
            continue  # an optional extra: pip install 'seq2seq[export]'
        try:
            _write_directory(run_dir / name, _writer(fmt, payload, model_cfg, tokenizers, path, None), replace=True)
            written[name] = run_dir / name
        except UserError as err:
            written[name] = err
    return written


def _writer(
    fmt: str,
    payload: dict[str, Any],
    model_cfg: ModelConfig,
    tokenizers: Tokenizers,
    path: Path,
    quantization: str | None,
) -> Callable[[Path], None]:
    """Writes the export in format `fmt` and the tokenizer into a directory; everything that can be
    refused is checked here, before any directory exists."""
    if fmt == "safetensors":
        write = safetensors_writer(payload, model_cfg, path)
    else:
        write = ctranslate2_writer(payload, model_cfg, tokenizers, path, quantization)

    def write_all(directory: Path) -> None:
        write(directory)
        tokenizers.save(directory)

    return write_all


def _model_config(payload: dict[str, Any], path: Path) -> ModelConfig:
    config = payload.get("config")
    model_cfg = model_config_of(config.get("model") if isinstance(config, dict) else None, path)
    return model_cfg


def _write_directory(output: Path, write: Callable[[Path], None], replace: bool = False) -> None:
    """`write` fills a new directory that then takes `output`'s name, by replacing.py's rule: a new
    output= under its lock (`new_output`), or with `replace` a run's own export replaced whole
    (`replaced_folder`). A failure leaves nothing behind, and is one line."""
    placing = replaced_folder(output) if replace else new_output(output, "output", COMMAND)
    try:
        with placing as staging:
            mask = current_umask()
            write(staging)
            for file in staging.iterdir():  # safetensors writes 0600; an export is an ordinary directory
                # A folder in it (an NLLB-family run's huggingface_tokenizer/) keeps its x bits, or it could not be entered.
                os.chmod(file, (0o777 if file.is_dir() else 0o666) & ~mask)
            os.chmod(staging, 0o777 & ~mask)  # mkdtemp makes it 0700
    except UserError:
        raise
    except Exception as err:  # OSError, and the writers' own: safetensors' SafetensorError on a full disk
        detail = getattr(err, "strerror", None) or (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{output}: could not write the export ({detail}); nothing was written") from err
