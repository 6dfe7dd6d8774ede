"""An export written into a directory, each file whole: the safetensors and CTranslate2 writers and their
tokenizer files (`format_writer`), the directory placed by replacing.py's rule (`write_directory`: a new
output=, or a run's own export replaced whole), and what training leaves in a run for translation,
model/ and ctranslate2/ (`write_run_exports`). seq2seq-export's work on its plan is
seq2seq/export/command.py's `export`, over these and the other formats' writers (marian.py, m2m100.py,
argos.py). A failure leaves nothing behind.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from seq2seq.artifacts.checkpoint import current_umask, load_checkpoint, model_config_of
from seq2seq.artifacts.ctranslate2_model import ctranslate2_writer
from seq2seq.artifacts.model_files import load_tokenizers
from seq2seq.artifacts.replacing import new_output, remove_folder_leftovers, replaced_folder
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, INFERENCE_DIR, RunDir
from seq2seq.artifacts.safetensors import safetensors_writer
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.tokenizer import Tokenizers

COMMAND = "seq2seq-export"


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
    model_cfg = payload_model_config(payload, path)
    written: dict[str, Path | UserError] = {}
    for name, fmt in RUN_EXPORTS.items():
        if name in skip:
            continue
        if fmt == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
            continue  # an optional extra: pip install 'seq2seq[export]'
        try:
            write_directory(
                run_dir / name, format_writer(fmt, payload, model_cfg, tokenizers, path, None), replace=True
            )
            written[name] = run_dir / name
        except UserError as err:
            written[name] = err
    return written


def format_writer(
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


def payload_model_config(payload: dict[str, Any], path: Path) -> ModelConfig:
    """The model config a checkpoint's payload records, checked (refused in one line naming `path`)."""
    config = payload.get("config")
    model_cfg = model_config_of(config.get("model") if isinstance(config, dict) else None, path)
    return model_cfg


def write_directory(output: Path, write: Callable[[Path], None], replace: bool = False) -> None:
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
