"""The decoding settings that may change from one call to the next on the same loaded model: one frozen
value that both engines take per call (`engine.decoding_with(settings)`), so that a server shares its
engines between requests without writing into them. Imports no torch.

The defaults are seq2seq-translate's (`TranslateConfig`): the command, the Python API and the server
read them from there.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config import TranslateConfig


@dataclass(frozen=True)
class DecodingSettings:
    """How to decode one batch; equal settings may share a batch (the server batches by them)."""

    beam: int = TranslateConfig.beam
    nbest: int = TranslateConfig.nbest
    length_penalty: float = TranslateConfig.length_penalty
    sampling: bool = TranslateConfig.sampling
    temperature: float = TranslateConfig.temperature
    top_k: int = TranslateConfig.top_k
    top_p: float = TranslateConfig.top_p
    seed: int = TranslateConfig.seed
    prefix: bool = TranslateConfig.prefix  # the lines come with target prefixes to continue
    # A multilingual model's direction: other targets are other batches, each decoded with its tag.
    src_lang: str | None = TranslateConfig.src_lang
    tgt_lang: str | None = TranslateConfig.tgt_lang
