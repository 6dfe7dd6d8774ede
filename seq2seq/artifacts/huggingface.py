"""Which Hugging Face model a directory holds, and the reader of its family: Marian (OPUS-MT,
marian.py), M2M-100 / NLLB-200 (m2m100.py) or mBART-50 (mbart.py). Another architecture is one line that names it.
`transformers` is imported only when one is read (the `huggingface` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seq2seq.artifacts import m2m100, marian, mbart
from seq2seq.artifacts.checkpoint import ModelPayload
from seq2seq.config import ModelConfig, UserError

# model_type -> why it cannot be read (the architectures people try next).
REFUSED = {
    "nllb-moe": "NLLB-MoE (NllbMoeForConditionalGeneration) has mixture-of-experts layers, which this tool's "
    "Transformer lacks; take a dense NLLB-200 model (nllb-200-distilled-600M, -1.3B, -3.3B)",
}
SUPPORTED = "Marian (OPUS-MT), M2M-100, NLLB-200 (dense) and mBART-50 models"
LANGUAGE_CODE_FAMILIES = {m2m100.MODEL_TYPE: m2m100, mbart.MODEL_TYPE: mbart}  # data.lang_tag=language_codes


def hf_config(directory: Path) -> Any:
    """config.json as transformers reads it; refused in one line unless its family is one this tool reads."""
    try:
        config = marian.transformers_module().AutoConfig.from_pretrained(str(directory))
    except (OSError, ValueError, KeyError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{directory}/config.json: transformers cannot read it: {first}") from err
    kind = config.model_type
    if kind in REFUSED:
        raise UserError(f"{directory}: model_type={kind!r}: {REFUSED[kind]}")
    if kind != "marian" and kind not in LANGUAGE_CODE_FAMILIES:
        architectures = ", ".join(getattr(config, "architectures", None) or [kind])
        raise UserError(f"{directory}: model_type={kind!r} ({architectures}); this tool imports {SUPPORTED}")
    return config


def has_language_codes(directory: Path) -> bool:
    """NLLB-200, M2M-100 or mBART-50: a model trained in its own layout of language codes."""
    return hf_config(directory).model_type in LANGUAGE_CODE_FAMILIES


# The families' names in messages, by their tokenizer's class (tokenizer_config.json), else by model_type.
FAMILY_NAMES = {"nllb": "NLLB-200", "m2m100": "M2M-100", "mbart50": "mBART-50"}


def family_name(directory: Path) -> str:
    """NLLB-200, M2M-100 or mBART-50: which of the language-code families the model in `directory` is
    (one architecture holds NLLB-200 and M2M-100: their tokenizers tell them apart)."""
    import json

    from seq2seq.data.fairseq_vocab import FAMILIES

    if hf_config(directory).model_type == mbart.MODEL_TYPE:
        return FAMILY_NAMES["mbart50"]
    try:
        tokenizer_config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokenizer_class = tokenizer_config["tokenizer_class"]
    except (OSError, ValueError, KeyError, TypeError):
        tokenizer_class = None
    family = FAMILIES.get(str(tokenizer_class))
    return FAMILY_NAMES[family] if family is not None else "NLLB-200/M2M-100"


def load_pretrained(value: str) -> tuple[ModelPayload, Any]:
    """(payload, tokenizers) of the Hugging Face model `value` names (a directory or a Hub id)."""
    return read_pretrained_directory(marian.local_directory(value))


def read_pretrained_directory(directory: Path) -> tuple[ModelPayload, Any]:
    """(payload, tokenizers) of the Hugging Face model in the local `directory`, whichever family it is."""
    config = hf_config(directory)
    if config.model_type in LANGUAGE_CODE_FAMILIES:
        return LANGUAGE_CODE_FAMILIES[config.model_type].read_pretrained(directory, config)
    return marian.load_pretrained(str(directory))


def pretrained_model_config(directory: Path, overrides: list[str], user: ModelConfig) -> ModelConfig:
    """The pretrained model's ModelConfig with the run's dropout overrides (marian.with_training_overrides)."""
    config = hf_config(directory)
    if config.model_type in LANGUAGE_CODE_FAMILIES:
        cfg = LANGUAGE_CODE_FAMILIES[config.model_type].model_config(config, str(directory))
        return marian.with_training_overrides(cfg, directory, overrides, user)
    return marian.pretrained_model_config(directory, overrides, user)
