"""Loading a model for inference: a training checkpoint or a `seq2seq-export` weights file, the
tokenizer beside it, in the precision this machine runs fastest, as a ready `Translator`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from seq2seq.checkpoint import (
    WEIGHTS_FILE,
    check_vocabulary,
    find_checkpoint,
    load_checkpoint,
    load_weights,
    model_from_checkpoint,
)
from seq2seq.config import UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.translator import Translator
from seq2seq.precision import choose_precision, log_choice

log = logging.getLogger("seq2seq.translate")


def load_translator(cfg: DictConfig, device: torch.device) -> Translator:
    """The Translator that `cfg` (a TranslateConfig) describes: run= or checkpoint=, precision,
    beam, length penalty, output budget, n-best and batch size."""
    if cfg.precision == "fp16" and device.type == "cpu":  # before loading: a config error costs no time
        choose_precision(cfg.precision, device, 0, 0)
    path = Path(cfg.checkpoint) if cfg.checkpoint else find_checkpoint(cfg.run)
    path, payload = read_model_file(path)
    tokenizers = load_tokenizers(path, cfg.run)
    check_vocabulary(payload, tokenizers, path)
    shape = payload["config"]["model"]
    choice = choose_precision(cfg.precision, device, shape["d_model"], shape["ffn_dim"])
    log_choice(choice, log)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
    model = model_from_checkpoint(payload).to(device=device, dtype=dtype).eval()
    if cfg.beam > tokenizers.tgt.get_vocab_size():
        raise UserError(f"beam={cfg.beam} is larger than the target vocabulary ({tokenizers.tgt.get_vocab_size()})")
    log.info("loaded %s (update %d)", path, payload.get("step", -1))
    return Translator(
        model, tokenizers, device, cfg.beam, cfg.length_penalty, cfg.max_len_a, cfg.max_len_b, cfg.nbest, cfg.batch_size
    )


def read_model_file(path: Path) -> tuple[Path, dict[str, Any]]:
    """(the file read, its checkpoint-shaped payload): a training checkpoint, or a `seq2seq-export`
    model.safetensors (given as the file or as its directory)."""
    if path.suffix == ".safetensors" or (path / WEIGHTS_FILE).is_file():
        path = path / WEIGHTS_FILE if path.is_dir() else path
        return path, load_weights(path)
    return path, load_checkpoint(path)


def load_tokenizers(checkpoint: Path, run: str | None) -> Tokenizers:
    """The tokenizer lives in the run directory; a checkpoint copied elsewhere may carry it beside itself."""
    candidates = [checkpoint.parent, checkpoint.parent.parent] + ([Path(run)] if run else [])
    for directory in candidates:
        try:
            return Tokenizers.load(directory)
        except FileNotFoundError:
            continue
    raise UserError(f"{checkpoint}: no tokenizer.json beside it or in its run directory")
