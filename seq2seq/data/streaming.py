"""The training stream for corpora too large to pre-tokenize (`data.streaming=true`).

The corpus files are read line by line, `data.stream_buffer_pairs` pairs at a time; each buffer is
tokenized, filtered and cut into token buckets (sorted by length within the buffer, so padding stays
low), and its batches are shuffled. Memory holds one buffer, whatever the size of the corpus.
data.clean's rules drop pairs as they are read, before any buffer: buffers count the pairs kept.
With data.corpora the corpora are read side by side, each its weight's worth of passes an epoch
(corpora.py), and each buffer's rows keep their corpus, for the tag and the counts.

The interface is EpochBatches': `next_update`, `state_dict`, `load_state_dict`, `epoch`. The position
is (epoch, buffer, batches of the buffer consumed), so a resumed run re-reads the lines of the buffers
before it (cleaning them again, without tokenizing them) and continues with the same batches, for any
number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, islice
from typing import Any

import numpy as np

from seq2seq.config import UserError
from seq2seq.data.batching import (
    Batch,
    check_same_corpora,
    check_same_stream,
    make_batches,
    ranks_batches,
    update_group,
)
from seq2seq.data.cleaning import CleaningReport
from seq2seq.data.corpora import BACK_TRANSLATION_TAG, AlignmentScorers, iter_training_rows, mixed_rows
from seq2seq.data.corpus_plan import CorpusPlan
from seq2seq.data.epoch_mix import CorpusTally
from seq2seq.data.pipeline import Split, TokenColumn, drop_by_text, keep_pair
from seq2seq.data.tokenizer import BOS_ID, Tokenizers


def token_column(rows: list[list[int]]) -> TokenColumn:
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    values = np.fromiter((i for r in rows for i in r), dtype=np.int32, count=int(offsets[-1]))
    return TokenColumn([values], [offsets])


class StreamingBatches:
    def __init__(
        self,
        corpus: CorpusPlan,
        tokenizers: Tokenizers,
        batch_tokens: int,
        seed: int,
        max_positions: int,
        start_id: int = BOS_ID,
        pad_multiple: int = 1,
    ) -> None:
        self.corpus, self.tokenizers, self.start_id, self.pad_multiple = corpus, tokenizers, start_id, pad_multiple
        self.data = corpus.data  # the filters and the buffer size
        self.batch_tokens, self.seed, self.max_positions = batch_tokens, seed, max_positions
        self.dropped = 0  # pairs the length filters removed so far (they are counted as they stream by)
        self.epoch, self.buffer, self.position = 1, 0, 0
        # data.corpora: its rows of this epoch and the tag (each corpus's lines: the plan's, counted once a run)
        self.corpora = bool(corpus.corpus_names)
        self.corpus_tally = CorpusTally(corpus.corpus_names) if self.corpora else None
        self.tagged = set(corpus.tagged)
        self.tag_id = tokenizers.src.token_to_id(BACK_TRANSLATION_TAG) if self.tagged else None
        self._batches: list[np.ndarray] | None = None  # read on first use, so a resume reads its buffer only
        # The alignment rule's scorer of each stream, learnt once a run and judging every pass: the plan's,
        # which the cache's build filled when it read the tokenizer's head, else the first pass fills it
        self._scorers: AlignmentScorers = corpus.alignment

    def _ensure_loaded(self) -> None:
        if self._batches is None:
            position = self.position
            self._start(self.epoch, self.buffer)
            self.position = position

    def _start(self, epoch: int, buffer: int) -> None:
        """Opens the corpus for `epoch` and loads buffer number `buffer` (0-based)."""
        self.epoch, self.buffer, self.position = epoch, buffer - 1, 0
        # data.clean's rules on the way, afresh each epoch (the duplicates of this pass, counted anew; the
        # alignment rule's tables kept from the first)
        self._pairs = self._epoch_rows(epoch)
        for _ in range(buffer):  # resuming: skip the lines of the buffers already trained on
            for _pair in islice(self._pairs, self.data.stream_buffer_pairs):
                pass
        if not self._next_buffer():
            raise UserError(
                f"no training pair to stream from buffer {buffer} on (data.max_tokens={self.data.max_tokens}, "
                f"data.max_length_ratio={self.data.max_length_ratio}, data.stream_buffer_pairs="
                f"{self.data.stream_buffer_pairs})"
            )

    def _epoch_rows(self, epoch: int) -> Iterator[tuple]:
        """One epoch's rows: data.kind's corpus as it reads, or data.corpora weighted and interleaved
        (corpora.py), as a pure function of (seed, epoch) so that a resume reads the same."""
        corpus, settings = self.corpus, self.data.clean_settings
        if not self.corpora:
            return iter_training_rows(corpus.streams, settings, corpus.languages, {}, CleaningReport(), self._scorers)
        rng = np.random.default_rng([self.seed, epoch, 0])  # [seed, epoch, buffer] seeds the batches
        lines = corpus.lines_of()  # counted at the run's first need, then the plan's
        rows = (corpus.streams, settings, corpus.languages, CleaningReport(), {}, lines, corpus.corpus_weights)
        return mixed_rows(*rows, rng, self._scorers)

    def _next_buffer(self) -> bool:
        """Reads, tokenizes and batches the next buffer; False at the end of the corpus."""
        while read := list(islice(self._pairs, self.data.stream_buffer_pairs)):
            self.buffer += 1
            early = {"dropped_empty": 0, "dropped_too_long": 0}
            pairs = list(drop_by_text(read, self.data.max_tokens, early))  # before the slow tokenizer
            self.dropped += len(read) - len(pairs)
            kept = self._tokenized(pairs)
            self.dropped += len(pairs) - len(kept)
            if not kept:
                continue
            self.split = Split(token_column([row[0] for row in kept]), token_column([row[1] for row in kept]))
            if self.corpora:
                self.split.corpora = np.asarray([row[2] for row in kept], dtype=np.int64)
            rng = np.random.default_rng([self.seed, self.epoch, self.buffer])
            self._batches = make_batches(
                self.split.src.lengths(), self.split.tgt.lengths(), self.batch_tokens, rng, self.pad_multiple
            )
            self.position = 0
            return True
        return False

    def _tokenized(self, pairs: list[tuple]) -> list[tuple]:
        """(source ids, target ids, *indices) of the pairs the length filters keep; a tagged corpus's
        sources then start with the tag, as the cached mode's do."""
        sources = self.tokenizers.encode_src([pair[0] for pair in pairs])
        targets = self.tokenizers.encode_tgt([pair[1] for pair in pairs])
        kept = []
        for pair, src, tgt in zip(pairs, sources, targets, strict=True):
            if keep_pair(len(src), len(tgt), self.data.max_tokens, self.data.max_length_ratio) is not None:
                continue
            if self.tagged and pair[2] in self.tagged:
                src = [self.tag_id, *src]
            kept.append((src, tgt, *pair[2:]))
        return kept

    def __len__(self) -> int:
        """Batches in the current buffer (an epoch's count is unknown until it has been read)."""
        self._ensure_loaded()
        return len(self._batches)

    def next_update(self, world_size: int, rank: int, accum_steps: int) -> list[Batch]:
        self._ensure_loaded()
        needed = world_size * accum_steps
        if self.position + needed > len(self._batches) and self.position > 0 and not self._next_buffer():
            self._start(self.epoch + 1, buffer=0)
        group = update_group(self._batches, self.position, needed)  # a buffer smaller than one update: cycled
        self.position += needed
        return ranks_batches(self, group, world_size, rank)

    def epochs_done(self, world_size: int, accum_steps: int) -> int:
        """Epochs fully trained on: the current one counts once its last buffer cannot fill the next
        update and the corpus has no line left (a trailing buffer that the filters empty is not foreseen:
        that epoch counts when the next one starts)."""
        self._ensure_loaded()
        needed = world_size * accum_steps
        ending = self.position > 0 and self.position + needed > len(self._batches) and not self._corpus_left()
        return self.epoch if ending else self.epoch - 1

    def _corpus_left(self) -> bool:
        try:
            first = next(self._pairs)
        except StopIteration:
            return False
        self._pairs = chain([first], self._pairs)  # put it back
        return True

    def state_dict(self) -> dict[str, Any]:
        state = {
            "epoch": self.epoch,
            "buffer": self.buffer,
            "position": self.position,
            "seed": self.seed,
            "batch_tokens": self.batch_tokens,
        }
        if self.corpus_tally is not None:  # what the position counts in, and the epoch's rows so far
            state["corpora"] = dict(zip(self.corpus.corpus_names, self.corpus.corpus_weights, strict=True))
            state["corpus_rows"] = self.corpus_tally.rows.tolist()
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        if "buffer" not in state:
            raise UserError("this checkpoint was not trained with data.streaming=true; resume without it")
        check_same_stream(state, self.batch_tokens, self.seed)
        if self.corpus_tally is not None or "corpora" in state:
            check_same_corpora(state, self.corpus.corpus_names, self.corpus.corpus_weights)
        self.epoch, self.buffer, self.position = int(state["epoch"]), int(state["buffer"]), int(state["position"])
        self._batches = None
        if self.corpus_tally is not None:
            self.corpus_tally = CorpusTally(self.corpus_tally.names, self.epoch, np.asarray(state["corpus_rows"]))
