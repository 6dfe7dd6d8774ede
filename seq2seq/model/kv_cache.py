"""What incremental decoding keeps between steps: each attention layer's keys and values, and the
decoder state that carries them with the encoder output.

Without a cache every decoding step would re-run the whole prefix; with it a step computes only the
new position's keys and values and attends to the cached ones. Rows are hypotheses: search drops
finished sentences (`select_sentences`) and beam search lets a row continue another row's prefix
(`reorder_beams`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class KVCache:
    """One attention layer's keys and values so far, each (rows, H, T, D): for masked self-attention
    those of the decoded prefix, one position more at every step; for cross-attention those of the
    encoder memory, computed at the first step and only read after."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def empty(self) -> bool:
        return self.k is None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Adds the keys and values (rows, H, t, D) of t new positions after the cached ones and
        returns those of every position."""
        if self.k is not None and self.v is not None:
            k = torch.cat([self.k, k], dim=2)
            v = torch.cat([self.v, v], dim=2)
        else:
            # The first keys and values are views into the K/V projection's output (one chunk of each
            # row), which a batched matmul cannot read in place: the cross-attention's, read at every step,
            # were copied at every step (docs/performance.md, decoding profile). Copied once here.
            k, v = k.contiguous(), v.contiguous()
        self.k, self.v = k, v
        return k, v

    def select_rows(self, index: torch.Tensor) -> None:
        """Keeps rows `index`, in that order; a row may be taken twice (a beam continued two ways)."""
        if self.k is not None and self.v is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


@dataclass
class LayerCache:
    """A decoder layer's two caches: masked self-attention (one row per hypothesis) and
    cross-attention (one row per sentence; see `DecoderState`)."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


@dataclass
class DecoderState:
    """What incremental decoding carries from one step to the next: the encoder output, its mask,
    each decoder layer's key/value cache and how many target positions have been decoded.

    With `group` > 1 (beam search), decoder rows r*group ... r*group+group-1 all decode sentence r:
    the memory and the cross-attention keys/values are kept once per sentence, not once per row, so
    beams neither copy nor re-read them (the cross-attention queries of a sentence's beams are
    answered together, see `seq2seq.model.kernels.attend`)."""

    memory: torch.Tensor  # (B, S, d_model), one row per sentence
    src_mask: torch.Tensor  # (B, 1, 1, S)
    caches: list[LayerCache] = field(default_factory=list)
    offset: int = 0
    group: int = 1

    def rows_of(self, sentences: torch.Tensor) -> torch.Tensor:
        """The decoder rows of sentences `sentences`, in order."""
        return (sentences[:, None] * self.group + torch.arange(self.group, device=sentences.device)).view(-1)

    def select_sentences(self, sentences: torch.Tensor) -> None:
        """Keep sentences `sentences` (e.g. drop those that are done), with all their rows."""
        rows = self.rows_of(sentences)
        self.memory = self.memory.index_select(0, sentences)
        self.src_mask = self.src_mask.index_select(0, sentences)
        for cache in self.caches:
            cache.self_attn.select_rows(rows)
            cache.cross_attn.select_rows(sentences)

    def reorder_beams(self, parents: torch.Tensor, group: int | None = None) -> None:
        """Beam search: row r continues the hypothesis of row parents[r], a row of the same sentence.
        Only the decoded prefix (the self-attention caches) follows; the rest is per sentence.
        `group`: rows per sentence from now on, when it changes (beam search's first step decodes
        one row per sentence, whose other beams would be copies of it, and then branches to k)."""
        for cache in self.caches:
            cache.self_attn.select_rows(parents)
        self.group = group or self.group
