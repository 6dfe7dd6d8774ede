"""What an engine is given besides its model files, in two frozen values, so that neither engine reads a
translate config:

- `DecodingSettings`: how to decode, which may change from one call to the next on the same loaded
  model; both engines take it per call (`engine.decoding_with(settings)`), so that a server shares its
  engines between requests without writing into them;
- `EngineOptions`: where and how the model loads (device, threads, precision), fixed for its life.

The defaults are seq2seq-translate's (`TranslateConfig`): the command, the Python API and the server
read them from there, and `of(cfg)` takes them from a translate config. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from seq2seq.config import TranslateConfig


@dataclass(frozen=True)
class DecodingSettings:
    """How to decode one batch; equal settings may share a batch (the server batches by them)."""

    beam: int = TranslateConfig.beam
    nbest: int = TranslateConfig.nbest
    length_penalty: float = TranslateConfig.length_penalty
    max_len_a: float = TranslateConfig.max_len_a
    max_len_b: int = TranslateConfig.max_len_b
    batch_size: int = TranslateConfig.batch_size
    sampling: bool = TranslateConfig.sampling
    temperature: float = TranslateConfig.temperature
    top_k: int = TranslateConfig.top_k
    top_p: float = TranslateConfig.top_p
    seed: int = TranslateConfig.seed
    prefix: bool = TranslateConfig.prefix  # the lines come with target prefixes to continue
    # A multilingual model's direction: other targets are other batches, each decoded with its tag.
    src_lang: str | None = TranslateConfig.src_lang
    tgt_lang: str | None = TranslateConfig.tgt_lang

    @classmethod
    def of(cls, cfg: Any, **changes: Any) -> DecodingSettings:
        """The settings of a translate config (a TranslateConfig or the command's DictConfig of one)."""
        return cls(**{**_values(cls, cfg), **changes})


@dataclass(frozen=True)
class EngineOptions:
    """Where and how an engine loads its model: fixed for the engine's life."""

    device: str = TranslateConfig.device  # auto, cpu, cuda, cuda:N
    threads: int | None = TranslateConfig.threads  # null: one per usable core
    precision: str = TranslateConfig.precision  # auto, fp32, bf16, fp16, int8 (CTranslate2's)

    @classmethod
    def of(cls, cfg: Any, **changes: Any) -> EngineOptions:
        return cls(**{**_values(cls, cfg), **changes})


def _values(cls: type, cfg: Any) -> dict[str, Any]:
    return {field.name: getattr(cfg, field.name) for field in fields(cls)}
