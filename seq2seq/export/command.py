"""`export(plan)`, the work of `seq2seq-export`: a training checkpoint as files for inference only, in
one of the formats of seq2seq.artifacts: safetensors (safetensors.py), ctranslate2 (ctranslate2_model.py),
huggingface (a MarianMTModel directory, marian.py; NLLB-200/M2M-100/mBART-50, m2m100.py) or argos (an
.argosmodel package, argos.py). `seq2seq-translate checkpoint=<output>` translates a safetensors or
ctranslate2 export.

The output directory is written under a temporary name beside it and renamed at the end, so a
failure leaves nothing behind; an existing output directory is refused (artifacts/exports.py's
`write_directory`, by replacing.py's rule).
"""

from __future__ import annotations

import functools
from pathlib import Path

from seq2seq.artifacts.checkpoint import check_vocabulary, load_checkpoint
from seq2seq.artifacts.ctranslate2_model import ctranslate2_writer
from seq2seq.artifacts.exports import COMMAND, format_writer, payload_model_config, write_directory
from seq2seq.artifacts.model_files import load_tokenizers
from seq2seq.artifacts.replacing import check_new, new_output
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.fairseq_vocab import FairseqTokenizers
from seq2seq.data.sentencepiece import SentencePieceTokenizers
from seq2seq.export.plan import ExportPlan


def export(plan: ExportPlan) -> tuple[Path, ModelConfig]:
    """Writes the export `plan` describes; returns its directory and the model's config."""
    output = plan.output
    check_new(output, "output")  # before the checkpoint is read: a wrong output= costs nothing
    path = Path(plan.checkpoint) if plan.checkpoint else RunDir(plan.run).find_checkpoint()
    payload = load_checkpoint(path)
    tokenizers = load_tokenizers(path, plan.run, payload.get("config", {}).get("data"))
    model_cfg = payload_model_config(payload, path)
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
        write_all = format_writer(plan.format, payload, model_cfg, tokenizers, path, plan.quantization)
    write_directory(output, write_all)
    return output, model_cfg
