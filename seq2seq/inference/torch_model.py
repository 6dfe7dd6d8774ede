"""Loading a model for PyTorch decoding: a run's weights, a training checkpoint, a `seq2seq-export` weights
file (several: an ensemble) or a Hugging Face Marian directory, with its tokenizer, in the precision
asked for. `Translator.from_job` builds its Translator on it (seq2seq.inference.loading)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import check_vocabulary, model_from_checkpoint
from seq2seq.artifacts.model_files import check_same_tokenizer, load_tokenizers, read_model_file
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, WEIGHTS_FILE
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, INFERENCE_DIR, RunDir
from seq2seq.config import UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.translator_api import check_beam_fits
from seq2seq.model.transformer import Transformer
from seq2seq.precision import choose_decoding_precision, choose_precision, log_choice

log = logging.getLogger("seq2seq.translate")


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
    run: str | None,
    checkpoints: list[str] | None,
    precision: str,
    device: torch.device,
    beam: int,
    model_file: str | None = None,
) -> tuple[Transformer | Ensemble, Tokenizers, dict[str, Any] | None]:
    """The model of `checkpoints` (training checkpoints or weights exports; several: an ensemble), else
    of `run`: `model_file` (as resolved), else RunDir.model_file's (the weights-only model/ that training
    writes at its end, else best.pt, else last.pt), and its tokenizer, on `device` in what `precision`
    comes to there. `beam` is checked against the target vocabulary before anything is logged: a bad
    setting is one line of error, not log lines and an error.
    The third value is the model's data config (its languages and tags: ModelLanguages.of), if it has one."""
    loaded = (
        [read_model_file(Path(p)) for p in checkpoints]
        if checkpoints
        else [_read_from_run(run, Path(model_file) if model_file else RunDir(run).model_file())]
    )
    tokenizers = load_tokenizers(loaded[0][0], run, loaded[0][1]["config"].get("data"))
    for path, payload in loaded[1:]:  # an ensemble: each member's tokenizer must be the first's
        check_same_tokenizer(load_tokenizers(path, run, payload["config"].get("data")), tokenizers, path, loaded[0][0])
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
    data = loaded[0][1]["config"].get("data")
    return (models[0] if len(models) == 1 else Ensemble(models)), tokenizers, data


def _read_from_run(run: str | Path, path: Path) -> tuple[Path, dict[str, Any]]:
    """The run's model file; when it cannot be read, the error also names what of the run can be."""
    try:
        return read_model_file(path)
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
