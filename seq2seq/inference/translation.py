"""What a translator returns for one hypothesis, and the checks both engines make; no torch here,
so the CTranslate2 path needs none."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config import UserError


@dataclass
class Translation:
    text: str
    score: float  # log P(output + EOS) / (tokens + 1) ** length_penalty; 0.0 for an empty line
    tokens: list[int]  # target token ids, without BOS and EOS (a forced prefix included)


def check_beam_fits(beam: int, vocabulary_size: int) -> None:
    """A beam needs that many distinct tokens to extend its hypotheses with."""
    if beam > vocabulary_size:
        raise UserError(f"beam={beam} is larger than the target vocabulary ({vocabulary_size})")
