"""An ensemble of models that share one vocabulary, decoded as one model.

At every step each model predicts the next token and the ensemble's log-probability of a token is
the log of the models' mean probability, log(1/n * sum_i p_i), as in fairseq's and Marian's
ensembles. Search sees the same interface as a `Transformer` (`start_decoding`, `decode_step`), and
the ensemble's state does to every model's state what search asks of one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from seq2seq.model.kv_cache import DecoderState
from seq2seq.model.transformer import Transformer


@dataclass
class EnsembleState:
    """One `DecoderState` per model, kept in step."""

    states: list[DecoderState]

    def rows_of(self, sentences: torch.Tensor) -> torch.Tensor:
        return self.states[0].rows_of(sentences)

    def select_sentences(self, sentences: torch.Tensor) -> None:
        for state in self.states:
            state.select_sentences(sentences)

    def reorder_beams(self, parents: torch.Tensor, group: int | None = None) -> None:
        for state in self.states:
            state.reorder_beams(parents, group)


class Ensemble(torch.nn.Module):
    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        if len({m.output.out_features for m in models}) != 1 or len({m.pad_id for m in models}) != 1:
            raise ValueError("the models of an ensemble need one target vocabulary")
        self.members = torch.nn.ModuleList(models)
        self.pad_id = models[0].pad_id
        self.output = models[0].output  # what the translator reads the weights' dtype from
        self.max_positions = min(m.cfg.max_positions for m in models)

    def start_decoding(self, src: torch.Tensor, group: int = 1) -> EnsembleState:
        return EnsembleState([model.start_decoding(src, group) for model in self.members])

    def decode_step(self, tokens: torch.Tensor, state: EnsembleState) -> torch.Tensor:
        """(R,) tokens -> (R, V) log of the models' mean next-token probability."""
        log_probs = torch.stack([m.decode_step(tokens, s) for m, s in zip(self.members, state.states, strict=True)])
        return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))
