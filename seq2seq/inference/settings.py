"""What an engine is given besides its model files, in two frozen values, so that neither engine reads a
translate config:

- `DecodingSettings`: how to decode, which may change from one call to the next on the same loaded
  model; both engines take it per call (`engine.decoding_with(settings)`), so that a server shares its
  engines between requests without writing into them;
- `EngineOptions`: where and how the model loads (device, threads, precision), fixed for its life.

The defaults and bounds are seq2seq/decoding_defaults.py's, which the translate, serve and distill
schemas read too; `DecodingSettings` checks itself as it is made, by the rules of the translate
config (config.validate_search, validate_sampling), so settings that reach an engine by any way in
(the commands, `load`, `decoding_with`, the server's requests, distill's teacher) are refused alike,
with the same one line. A translate config becomes them in one place: job.decoding_job. Imports no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq import decoding_defaults as default
from seq2seq.config import TranslateConfig, validate_sampling, validate_search


@dataclass(frozen=True)
class DecodingSettings:
    """How to decode one batch; equal settings may share a batch (the server batches by them)."""

    beam: int = default.BEAM
    nbest: int = default.NBEST
    length_penalty: float = default.LENGTH_PENALTY
    max_len_a: float = default.MAX_LEN_A
    max_len_b: int = default.MAX_LEN_B
    batch_size: int = default.BATCH_SIZE
    sampling: bool = default.SAMPLING
    temperature: float = default.TEMPERATURE
    top_k: int = default.TOP_K
    top_p: float = default.TOP_P
    seed: int = default.SEED
    prefix: bool = TranslateConfig.prefix  # the lines come with target prefixes to continue
    # A multilingual model's direction: other targets are other batches, each decoded with its tag.
    src_lang: str | None = TranslateConfig.src_lang
    tgt_lang: str | None = TranslateConfig.tgt_lang

    def __post_init__(self) -> None:
        """Settings that no engine decodes are never made: nbest beyond the beam, a seed numpy and
        CTranslate2 refuse, a temperature of 0, a wrong type ... (a ConfigValueError or
        ConfigTypeError naming the key, as the commands print it)."""
        validate_search(self)
        validate_sampling(self)


@dataclass(frozen=True)
class EngineOptions:
    """Where and how an engine loads its model: fixed for the engine's life."""

    device: str = TranslateConfig.device  # auto, cpu, cuda, cuda:N
    threads: int | None = TranslateConfig.threads  # null: one per usable core
    precision: str = TranslateConfig.precision  # auto, fp32, bf16, fp16, int8 (CTranslate2's)
