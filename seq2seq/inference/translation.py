"""What a translator returns for one hypothesis, and the checks both engines make; no torch here,
so the CTranslate2 path needs none."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.config import UserError


@dataclass
class Translation:
    text: str
    score: float  # log P(output + EOS) / (tokens + 1) ** length_penalty (a line cut at its budget: no EOS); 0.0 for an empty line
    tokens: list[int]  # target token ids, without BOS and EOS (a forced prefix included)


def check_beam_fits(beam: int, vocabulary_size: int) -> None:
    """A beam needs that many distinct tokens to extend its hypotheses with."""
    if beam > vocabulary_size:
        raise UserError(f"beam={beam} is larger than the target vocabulary ({vocabulary_size})")


def to_translate(lines: list[str], prefixes: list[str] | None) -> list[int]:
    """The indices of the lines to decode: an empty (or blank) line translates to an empty line without
    decoding, unless it has a target prefix, which every translation starts with."""
    return [i for i, line in enumerate(lines) if line.strip() or (prefixes is not None and prefixes[i])]


def output_budget(source_tokens: int, prefix_tokens: int, a: float, b: int, max_positions: int) -> int:
    """The most output tokens a line may have, </s> included, in both engines (one function, so that
    they cannot round or clamp differently): a * (source tokens + </s>) + b, at least the prefix + b
    (a prefix never uses up a line's output), within the model's positions."""
    budget = int((source_tokens + 1) * a + b)
    if prefix_tokens:
        return max(1, min(max(budget, prefix_tokens + b), max_positions - 1))
    return max(1, min(budget, max_positions))
