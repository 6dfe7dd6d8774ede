"""Raw text in, translations out: tokenize, sort by length, batch, search, detokenize, restore order.

Used by `seq2seq-translate` and by validation during training, so both decode the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizers
from seq2seq.device import half_precision_on_cpu
from seq2seq.inference.search import Hypothesis, beam_search, greedy_search, max_output_lengths
from seq2seq.model.transformer import Transformer

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    score: float  # Hypothesis.score: log P(output + EOS) / (tokens + 1) ** length_penalty; 0.0 for an empty line
    tokens: list[int]


class Translator:
    """A loaded model and its tokenizers, set up once, that translates lists of strings (`translate`).
    `seq2seq.inference.loading.load_translator` builds one from a translate config."""

    def __init__(
        self,
        model: Transformer,
        tokenizers: Tokenizers,
        device: torch.device,
        beam: int = 1,
        length_penalty: float = 1.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        nbest: int = 1,
        batch_size: int = 64,
    ) -> None:
        self.model = model
        self.tokenizers = tokenizers
        self.device = device
        self.beam = beam
        self.length_penalty = length_penalty
        self.max_len_a = max_len_a
        self.max_len_b = max_len_b
        self.nbest = nbest
        self.batch_size = batch_size
        self.max_positions = model.cfg.max_positions

    def encode(self, lines: list[str], first_line_number: int = 1) -> list[list[int]]:
        """Source ids + EOS, cut to the model's positions with a warning that names the line."""
        encoded = []
        for offset, ids in enumerate(self.tokenizers.encode_src(lines)):
            if len(ids) + 1 > self.max_positions:
                log.warning(
                    "input line %d has %d tokens, more than the model's %d positions: translating its first %d",
                    first_line_number + offset,
                    len(ids),
                    self.max_positions,
                    self.max_positions - 1,
                )
                ids = ids[: self.max_positions - 1]
            encoded.append([*ids, EOS_ID])
        return encoded

    def _search(self, src: torch.Tensor) -> list[list[Hypothesis]]:
        max_len = max_output_lengths(src, PAD_ID, self.max_len_a, self.max_len_b, self.max_positions)
        # A half-precision model on a CPU runs on oneDNN kernels built per matrix shape: let the batch
        # shrink in steps of 16 sentences so that few shapes occur (see speedups.rows_to_keep).
        multiple = 16 if half_precision_on_cpu(self.model.output.weight) else 1
        if self.beam == 1:
            hyps = greedy_search(self.model, src, BOS_ID, EOS_ID, max_len, self.length_penalty, multiple)
            return [[h] for h in hyps]
        return beam_search(
            self.model, src, BOS_ID, EOS_ID, max_len, self.beam, self.length_penalty, self.nbest, multiple
        )

    @torch.inference_mode()
    def translate(self, lines: list[str], first_line_number: int = 1) -> list[list[Translation]]:
        """One list of `nbest` translations per input line, in input order. Empty lines stay empty."""
        self.model.eval()
        results: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]
        encoded = dict(zip(todo, self.encode([lines[i] for i in todo], first_line_number), strict=True))
        # Longest first: similar lengths share a batch (little padding), and the slowest batch shows up early.
        todo.sort(key=lambda i: len(encoded[i]), reverse=True)
        for batch in _chunks(todo, self.batch_size):
            src = torch.full((len(batch), max(len(encoded[i]) for i in batch)), PAD_ID, dtype=torch.long)
            for row, i in enumerate(batch):
                src[row, : len(encoded[i])] = torch.tensor(encoded[i])
            for i, hyps in zip(batch, self._search(src.to(self.device)), strict=True):
                texts = self.tokenizers.decode_tgt([h.tokens for h in hyps])
                results[i] = [Translation(t, h.score, h.tokens) for t, h in zip(texts, hyps, strict=True)]
        return results


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
