"""mBART-50 (`MBartForConditionalGeneration` with `MBart50Tokenizer`, the many-to-many models) into this
project, read as `init_from=` and decoding read NLLB-200 (seq2seq.artifacts.m2m100): the same layers
and names, the same layout (source `en_XX ... </s>`, decoder `</s> de_DE ...`), the same tokenizer
kind (seq2seq.data.fairseq_vocab). What differs: learned positions whose first token reads row 2
(fairseq's offset), a LayerNorm on the embeddings and positions of each stack (layernorm_embedding:
model.embedding_norm), and final_logits_bias (model.output_bias). Export back (`to_mbart`, `MBART`) is
M2M-100's writer with mBART's classes and these weights put back.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts import m2m100
from seq2seq.artifacts.checkpoint import ModelPayload
from seq2seq.config import ModelConfig
from seq2seq.data.fairseq_vocab import FairseqTokenizers
from seq2seq.model.embedding import FAIRSEQ_POSITION_OFFSET

MODEL_TYPE = "mbart"


def model_config(hf: Any, where: str) -> ModelConfig:
    """The ModelConfig of an MBartConfig: NLLB's, with mBART's positions, embedding norms and logits bias."""
    return replace(
        m2m100.model_config(hf, where),
        positions="learned",
        sinusoid_layout="interleaved",
        embedding_norm=True,
        output_bias=True,
    )


def to_seq2seq(hf_state: dict[str, torch.Tensor], cfg: ModelConfig, order: list[int]) -> dict[str, torch.Tensor]:
    """mBART's state dict -> ours: M2M-100's names, and the positions, embedding norms and logits bias."""
    state = m2m100.to_seq2seq(hf_state, cfg, order)
    for ours, stack in (("src", "encoder"), ("tgt", "decoder")):
        table = hf_state[f"model.{stack}.embed_positions.weight"][FAIRSEQ_POSITION_OFFSET:]
        state[f"{ours}_positions.table"] = table[: cfg.max_positions].clone()
        for kind in ("weight", "bias"):
            state[f"{ours}_embed_norm.{kind}"] = hf_state[f"model.{stack}.layernorm_embedding.{kind}"].clone()
    state["output_bias"] = hf_state["final_logits_bias"].reshape(-1)[torch.tensor(order)].clone()
    return state


def to_mbart(state: dict[str, torch.Tensor], cfg: ModelConfig, order: list[int]) -> dict[str, torch.Tensor]:
    """Ours -> mBART's state dict (the inverse of `to_seq2seq`). The two rows of each position table
    before fairseq's offset are never read (position p reads row p + 2): they are written as zeros."""
    hf = m2m100.to_m2m100(state, cfg, order)
    for ours, stack in (("src", "encoder"), ("tgt", "decoder")):
        table = state[f"{ours}_positions.table"].detach().float()
        unread = table.new_zeros(FAIRSEQ_POSITION_OFFSET, table.size(1))
        hf[f"model.{stack}.embed_positions.weight"] = torch.cat([unread, table]).contiguous()
        for kind in ("weight", "bias"):
            hf[f"model.{stack}.layernorm_embedding.{kind}"] = state[f"{ours}_embed_norm.{kind}"].detach().float()
    bias = state["output_bias"].detach().float()[torch.argsort(torch.tensor(order))]
    hf["final_logits_bias"] = bias.reshape(1, -1).contiguous()
    return hf


MBART = m2m100.HuggingFaceFamily(
    "MBartConfig", "MBartForConditionalGeneration", to_mbart, True, MODEL_TYPE, model_config, to_seq2seq
)
CODES = ("en_XX", "de_DE")  # English and German as mBART-50 names them (the model card's example)


def read_pretrained(directory: Path, hf_config: Any) -> tuple[ModelPayload, FairseqTokenizers]:
    """A checkpoint-shaped payload of the mBART-50 model in `directory` and its tokenizer."""
    return m2m100.read_pretrained(directory, hf_config, "MBartForConditionalGeneration", model_config, to_seq2seq)
