"""Loading a model for inference: a training checkpoint or a `seq2seq-export` weights file, the
tokenizer beside it, in the precision this machine runs fastest, as a ready `Translator`."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig

from seq2seq.checkpoint import check_vocabulary, find_model_file, model_from_checkpoint, read_model_file
from seq2seq.config import TranslateConfig, UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.translation import check_beam_fits
from seq2seq.inference.translator import Translator
from seq2seq.precision import choose_precision, log_choice

log = logging.getLogger("seq2seq.translate")


def load_translator(cfg: DictConfig | TranslateConfig, device: torch.device) -> Translator:
    """The Translator that `cfg` (a TranslateConfig) describes: run= or checkpoint= (several,
    comma-separated: an ensemble), precision, search or sampling settings, batch size."""
    if cfg.precision == "fp16" and device.type == "cpu":  # before loading: a config error costs no time
        choose_precision(cfg.precision, device, 0, 0)
    if cfg.precision == "int8":
        raise UserError(
            "config error: precision=int8: only the CTranslate2 engine decodes in int8 "
            "(seq2seq-translate run=<run> precision=int8, or CTranslate2Translator.load)"
        )
    sampling = SamplingRule(cfg.temperature, cfg.top_k, cfg.top_p) if cfg.sampling else None
    paths = [Path(p) for p in str(cfg.checkpoint).split(",")] if cfg.checkpoint else [find_model_file(cfg.run)]
    loaded = [read_model_file(path) for path in paths]
    tokenizers = load_tokenizers(loaded[0][0], cfg.run)
    for path, _ in loaded[1:]:  # an ensemble: each member's tokenizer must be the first's
        check_same_tokenizer(load_tokenizers(path, cfg.run), tokenizers, path, loaded[0][0])
    for path, payload in loaded:
        check_vocabulary(payload, tokenizers, path)
    shape = loaded[0][1]["config"]["model"]
    choice = choose_precision(cfg.precision, device, shape["d_model"], shape["ffn_dim"])
    log_choice(choice, log)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
    models = [model_from_checkpoint(payload).to(device=device, dtype=dtype).eval() for _, payload in loaded]
    check_beam_fits(cfg.beam, tokenizers.tgt.get_vocab_size())
    for path, payload in loaded:
        log.info("loaded %s (update %d)", path, payload.get("step", -1))
    return Translator(
        models[0] if len(models) == 1 else Ensemble(models),
        tokenizers,
        device,
        cfg.beam,
        cfg.length_penalty,
        cfg.max_len_a,
        cfg.max_len_b,
        cfg.nbest,
        cfg.batch_size,
        sampling=sampling,
        seed=cfg.seed,
    )


def check_same_tokenizer(tokenizers: Tokenizers, first: Tokenizers, path: Path, first_path: Path) -> None:
    """An ensemble reads and writes one vocabulary: every member's tokenizer must be the first's."""
    same = tokenizers.src.to_str() == first.src.to_str() and tokenizers.tgt.to_str() == first.tgt.to_str()
    if not same:
        raise UserError(
            f"{path}: its tokenizer differs from that of {first_path}; an ensemble needs checkpoints that "
            "share one tokenizer (checkpoints of one run)"
        )


def load_tokenizers(checkpoint: Path, run: str | None) -> Tokenizers:
    """The tokenizer lives in the run directory; a checkpoint copied elsewhere may carry it beside itself."""
    candidates = [checkpoint.parent, checkpoint.parent.parent] + ([Path(run)] if run else [])
    for directory in candidates:
        try:
            return Tokenizers.load(directory)
        except FileNotFoundError:
            continue
    raise UserError(f"{checkpoint}: no tokenizer.json beside it or in its run directory")
