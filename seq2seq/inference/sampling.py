"""Sampling the next token: temperature, top-k and top-p (nucleus) filtering, seeded.

For back-translation and data augmentation, where a sample of the model's distribution makes better
synthetic sources than its single best output (Edunov et al., 2018, "Understanding Back-Translation at
Scale"). The same rules as fairseq's and Hugging Face's samplers: the temperature divides the
log-probabilities, then top-k keeps the k most likely tokens, then top-p keeps the smallest set of the
most likely tokens whose probability adds up to at least p (the most likely token always stays).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from seq2seq.config import TranslateConfig, validate_sampling


@dataclass(frozen=True)
class SamplingRule:
    temperature: float = TranslateConfig.temperature  # > 0; below 1 sharpens the distribution, above 1 flattens it
    top_k: int = TranslateConfig.top_k  # keep the k most likely tokens; 0 keeps all
    top_p: float = TranslateConfig.top_p  # in (0, 1]: keep the most likely tokens up to this much probability

    def __post_init__(self) -> None:
        validate_sampling(self)  # the translate config's rules and messages

    def filter(self, log_probs: torch.Tensor) -> torch.Tensor:
        """(R, V) log-probabilities -> (R, V) logits of the distribution to sample from: tempered, and
        -inf outside the top-k / top-p sets. Rows need not be normalised."""
        logits = log_probs.float() / self.temperature
        if self.top_k and self.top_k < logits.size(-1):
            kth_best = logits.topk(self.top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth_best, float("-inf"))
        if self.top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(dim=-1)
            before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
            drop_sorted = before >= self.top_p  # the first token (before = 0) always stays
            logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
        return logits

    def sample(self, log_probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(R, V) log-probabilities -> (R,) sampled token ids."""
        probs = self.filter(log_probs).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
