"""What a translator returns for one hypothesis; no torch here, so the CTranslate2 path needs none."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Translation:
    text: str
    score: float  # log P(output + EOS) / (tokens + 1) ** length_penalty; 0.0 for an empty line
    tokens: list[int]  # target token ids, without BOS and EOS (a forced prefix included)
