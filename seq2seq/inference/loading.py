"""Loading a model for inference: a run's weights, a training checkpoint or a `seq2seq-export` weights
file (several: an ensemble), with the tokenizer beside it, in the precision this machine runs fastest.
`Translator.from_config` and `Translator.load` build their Translator on it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import check_vocabulary, find_model_file, model_from_checkpoint, read_model_file
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, WEIGHTS_FILE, PathKind, path_kind
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, INFERENCE_DIR, RunDir
from seq2seq.config import UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.translation import check_beam_fits
from seq2seq.model.transformer import Transformer
from seq2seq.precision import choose_decoding_precision, choose_precision, log_choice

log = logging.getLogger("seq2seq.translate")
# What reads the models PyTorch translation does not: said instead of "not a checkpoint".
OTHER_READERS = {
    PathKind.CTRANSLATE2: "CTranslate2Translator.load or seq2seq-translate (engine=auto) decodes it",
    PathKind.HUGGINGFACE: "seq2seq-train init_from=<it> imports it",
}


def check_precision(precision: str, device: torch.device) -> None:
    """What PyTorch cannot decode in, refused before loading: a config error costs no time."""
    if precision == "fp16" and device.type == "cpu":
        choose_precision(precision, device, 0, 0)
    if precision == "int8":
        raise UserError(
            "config error: precision=int8: only the CTranslate2 engine decodes in int8 "
            "(seq2seq-translate run=<run> precision=int8, or CTranslate2Translator.load)"
        )


def load_model(
    run: str | None, checkpoints: list[str] | None, precision: str, device: torch.device, beam: int
) -> tuple[Transformer | Ensemble, Tokenizers]:
    """The model of `checkpoints` (training checkpoints or weights exports; several: an ensemble), else
    of `run` (the weights-only model/ that training writes at its end, else best.pt, else last.pt), and
    its tokenizer, on `device` in what `precision` comes to there. `beam` is checked against the target
    vocabulary before anything is logged: a bad setting is one line of error, not log lines and an error."""
    loaded = [_read(Path(p)) for p in checkpoints] if checkpoints else [_read_from_run(run, find_model_file(run))]
    tokenizers = load_tokenizers(loaded[0][0], run)
    for path, _ in loaded[1:]:  # an ensemble: each member's tokenizer must be the first's
        check_same_tokenizer(load_tokenizers(path, run), tokenizers, path, loaded[0][0])
    for path, payload in loaded:
        check_vocabulary(payload, tokenizers, path)
    shape = loaded[0][1]["config"]["model"]
    choice = choose_decoding_precision(precision, device, shape["d_model"], shape["ffn_dim"])
    log_choice(choice, log)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
    models = [model_from_checkpoint(payload).to(device=device, dtype=dtype).eval() for _, payload in loaded]
    check_beam_fits(beam, tokenizers.tgt.get_vocab_size())
    for path, payload in loaded:
        log.info("loaded %s (update %d)", path, payload.get("step", -1))
    return (models[0] if len(models) == 1 else Ensemble(models)), tokenizers


def _read(path: Path) -> tuple[Path, dict[str, Any]]:
    kind = path_kind(path)
    if kind in OTHER_READERS:
        raise UserError(f"{path}: {kind.value}, not one PyTorch translation reads; {OTHER_READERS[kind]}")
    return read_model_file(path)


def _read_from_run(run: str | Path, path: Path) -> tuple[Path, dict[str, Any]]:
    """The run's model file; when it cannot be read, the error also names what of the run can be."""
    try:
        return _read(path)
    except UserError as err:
        run = Path(run)
        others = [
            f"checkpoint={candidate}"
            for candidate, sign in [
                (run / INFERENCE_DIR, WEIGHTS_FILE),
                (run / CTRANSLATE2_DIR, CTRANSLATE2_FILE),
                (RunDir(run).checkpoint("last"), None),
            ]
            if (candidate / sign if sign else candidate).is_file() and candidate != path and candidate != path.parent
        ]
        if not others:
            raise
        raise UserError(f"{err}; translate with another of the run's models: {', '.join(others)}") from err


def check_same_tokenizer(
    tokenizers: Tokenizers, first: Tokenizers, path: Path, first_path: Path, what: str = "an ensemble"
) -> None:
    """An ensemble reads and writes one vocabulary, and an average of weights is only meaningful where
    each id is the same token: every checkpoint's tokenizer must be the first's."""
    same = tokenizers.src.to_str() == first.src.to_str() and tokenizers.tgt.to_str() == first.tgt.to_str()
    if not same:
        raise UserError(
            f"{path}: its tokenizer differs from that of {first_path}; {what} needs checkpoints that "
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
