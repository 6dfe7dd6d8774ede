"""Token-bucket batches: sentences of similar length together, so padding stays small, and a batch
holds about `batch_tokens` tokens rather than a fixed number of sentences.

The batch order of an epoch is a pure function of (seed, epoch), so the position inside an epoch
(how many batches were consumed) is all a checkpoint needs to resume the data stream exactly, with
any number of ranks: each update consumes `world_size * accum_steps` consecutive batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seq2seq.config import UserError
from seq2seq.data.epoch_mix import CorpusTally, direction_shares, epoch_rows, weighted_direction_counts, weighted_rows
from seq2seq.data.pipeline import Split
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (B, S) source ids + EOS, padded
    tgt_in: torch.Tensor  # (B, T) BOS + target ids, padded
    tgt_out: torch.Tensor  # (B, T) target ids + EOS, padded
    indices: np.ndarray  # which sentences of the split
    src_tokens: int  # real (non-pad) tokens
    tgt_tokens: int
    # Flat indices of the real target positions in (B*T), made with the batch: the loss selects those
    # rows with them instead of a boolean mask, whose result size a GPU would report to the host.
    tgt_positions: torch.Tensor | None = None

    def to(self, device: torch.device) -> Batch:
        """The batch on `device`, with its target positions. To a GPU from pinned memory without
        blocking: the copies queue behind the work already issued, and the host goes on."""
        positions = self.tgt_positions
        if positions is None:
            positions = (self.tgt_out != PAD_ID).flatten().nonzero().squeeze(1)
        tensors = tuple(_to_device(t, device) for t in (self.src, self.tgt_in, self.tgt_out, positions))
        return Batch(*tensors[:3], self.indices, self.src_tokens, self.tgt_tokens, tensors[3])


def _to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def padded_width(length: int | np.ndarray, multiple: int) -> int | np.ndarray:
    """`length` rounded up to a multiple of `multiple` (1: unchanged)."""
    return -(-length // multiple) * multiple


def make_batches(
    src_len: np.ndarray,
    tgt_len: np.ndarray,
    batch_tokens: int,
    rng: np.random.Generator | None,
    pad_multiple: int = 1,
) -> list[np.ndarray]:
    """Groups sentence indices into batches whose padded size, sentences x longest side (+2 for
    BOS/EOS, rounded up to `pad_multiple`), stays within `batch_tokens`. Sentences are taken in order
    of their longer side, then of the source's length, then of the target's, so that each side's
    width in a batch is close to each sentence's own: among Multi30k's sentences of one longest side
    the other side's length varies, and its padding is computed for nothing (docs/performance.md,
    "Padding"). With `rng`, the remaining ties (sentences of the same two lengths) are broken at
    random and the batch order is shuffled; without, the order is by length (for evaluation)."""
    longest = padded_width(np.maximum(src_len, tgt_len) + 2, pad_multiple)
    tiebreak = rng.random(len(longest)) if rng is not None else np.arange(len(longest))
    order = np.lexsort((tiebreak, tgt_len, src_len, longest))
    batches, start = [], 0
    while start < len(order):
        # Sorted ascending: the last sentence in the window is the longest, so padded size = count * its length.
        end = start + 1
        while end < len(order) and (end + 1 - start) * longest[order[end]] <= batch_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def update_group(batches: list[np.ndarray], position: int, needed: int) -> list[np.ndarray]:
    """The `needed` batches (of row indices) from `position` on that make the next update, every rank's;
    where fewer are left, those cycled to fill it (a corpus, or a buffer, smaller than one update)."""
    group = batches[position : position + needed]
    return group if len(group) == needed else [group[i % len(group)] for i in range(needed)]


def ranks_batches(source: Any, group: list[np.ndarray], world_size: int, rank: int) -> list[Batch]:
    """This rank's share of an update's `group`, padded; the epoch's corpus tally counts every rank's
    rows, so that any rank's counts are the epoch's. `source`: EpochBatches or StreamingBatches (their
    split, epoch, tally and padding)."""
    if source.corpus_tally is not None:
        source.corpus_tally.add(source.epoch, source.split.corpora[np.concatenate(group)])
    shape = (source.max_positions, source.start_id, source.pad_multiple)
    return [collate(source.split, indices, *shape) for indices in group[rank::world_size]]


def collate(
    split: Split, indices: np.ndarray, max_positions: int, start_id: int = BOS_ID, pad_multiple: int = 1
) -> Batch:
    """Pads a batch; sides longer than the model's positions are cut (only happens for held-out data).
    `start_id`: the token targets start from (`decoder_start_id`). `pad_multiple`: each side's width
    is rounded up to a multiple of it, so that batches come in few shapes (what a GPU's compiled
    kernels and plans are made for). A split whose targets begin with a language tag
    (`split.target_tag`, data.lang_tag=decoder_start) feeds the tag after the start token and leaves it
    out of the loss: the tag is given, as at translation time, not predicted."""
    srcs = [np.append(split.src[i][: max_positions - 1], EOS_ID) for i in indices]
    tgts = [split.tgt[i][: max_positions - 1] for i in indices]
    src_width = padded_width(max(len(s) for s in srcs), pad_multiple)
    tgt_width = padded_width(max(len(t) for t in tgts) + 1, pad_multiple)
    src = np.full((len(indices), src_width), PAD_ID, dtype=np.int64)
    tgt_in = np.full((len(indices), tgt_width), PAD_ID, dtype=np.int64)
    tgt_out = np.full_like(tgt_in, PAD_ID)
    for row, (s, t) in enumerate(zip(srcs, tgts, strict=True)):
        src[row, : len(s)] = s
        tgt_in[row, 0] = start_id
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
    if split.target_tag:
        tgt_out[:, 0] = PAD_ID  # the tag: in tgt_in, never a prediction
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        np.asarray(indices),
        sum(len(s) for s in srcs),
        sum(len(t) + 1 for t in tgts) - (len(tgts) if split.target_tag else 0),
        torch.from_numpy(np.flatnonzero(tgt_out != PAD_ID)),
    )


def split_batch(batch: Batch) -> list[Batch]:
    """The batch as two batches of half its sentences each (the first half gets the odd one), each
    padded only to its own longest sentence: exactly what `collate` gives for those sentences. Used to
    retry an update that ran out of memory. A batch of one sentence cannot be split: returned as is."""
    rows = batch.src.size(0)
    if rows < 2:
        return [batch]
    middle = (rows + 1) // 2
    return [_select_rows(batch, slice(0, middle)), _select_rows(batch, slice(middle, rows))]


def _select_rows(batch: Batch, rows: slice) -> Batch:
    src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
    src_width = int((src != PAD_ID).sum(dim=1).max())
    tgt_width = _last_real_position(tgt_out)  # not a count: a target tag leaves a pad at position 0
    src = src[:, :src_width].contiguous()
    tgt_out = tgt_out[:, :tgt_width].contiguous()
    return Batch(
        src,
        tgt_in[:, :tgt_width].contiguous(),
        tgt_out,
        batch.indices[rows],
        int((src != PAD_ID).sum()),
        int((tgt_out != PAD_ID).sum()),
    )


def _last_real_position(rows: torch.Tensor) -> int:
    """1 + the index of the last non-pad column of any row."""
    positions = torch.arange(1, rows.size(1) + 1) * (rows != PAD_ID)
    return int(positions.max())


def check_same_stream(state: dict[str, int], batch_tokens: int, seed: int) -> None:
    """A saved position counts batches of the saved (batch_tokens, seed): with others it would point
    elsewhere in another sequence of batches, so a resumed run cannot change them."""
    for key, value in (("batch_tokens", batch_tokens), ("seed", seed)):
        saved = state.get(key, value)
        if saved != value:
            raise UserError(
                f"resume: {key}={value} differs from the checkpoint's {key}={saved}, which its data position "
                f"counts in; keep {saved}, or start a new run with init_from=<checkpoint>"
            )


def check_same_corpora(state: dict[str, Any], names: tuple[str, ...], weights: tuple[float, ...]) -> None:
    """A saved position counts rows of data.corpora's names and weights: a resume must keep them."""
    now = dict(zip(names, weights, strict=True)) or None
    if state.get("corpora") != now:
        raise UserError(
            f"resume: data.corpora's names and weights {now} differ from the checkpoint's {state.get('corpora')}, "
            "which its data position counts in; keep them, or start a new run with init_from=<checkpoint>"
        )


class EpochBatches:
    """The training stream: epoch after epoch of shuffled token buckets, resumable at any update."""

    def __init__(
        self,
        split: Split,
        batch_tokens: int,
        seed: int,
        max_positions: int,
        start_id: int = BOS_ID,
        pad_multiple: int = 1,
    ) -> None:
        self.split = split
        self.start_id = start_id
        self.pad_multiple = pad_multiple
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.max_positions = max_positions
        self.src_len, self.tgt_len = split.src.lengths(), split.tgt.lengths()
        # A multilingual split: each epoch gives each direction its temperature share (epoch_mix).
        # ... of the rows data.corpora's weights make (epoch_mix): the temperature acts on top of them.
        self.shares = None
        if split.directions is not None and split.sampling_temperature is not None:
            counts = weighted_direction_counts(
                split.directions, split.corpora, split.corpus_weights, len(split.direction_names)
            )
            self.shares = direction_shares(counts.tolist(), split.sampling_temperature)
        self.epoch = 1
        self.position = 0  # batches of this epoch already consumed
        self._batches = self._epoch_batches(self.epoch)
        # data.corpora: the rows each corpus gave this epoch, as handed out (the log and TensorBoard show them)
        self.corpus_tally = CorpusTally(split.corpus_names) if split.corpora is not None else None

    def _epoch_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        if self.shares is None and self.split.corpora is None:
            return make_batches(self.src_len, self.tgt_len, self.batch_tokens, rng, self.pad_multiple)
        rows = np.arange(len(self.split))
        if self.split.corpora is not None:
            rows = weighted_rows(self.split.corpora, self.split.corpus_weights, rng)
        if self.shares is not None:
            rows = rows[epoch_rows(self.split.directions[rows], self.shares, rng)]
        batches = make_batches(self.src_len[rows], self.tgt_len[rows], self.batch_tokens, rng, self.pad_multiple)
        return [rows[batch] for batch in batches]  # length-sorted across directions and corpora: batches mix them

    def __len__(self) -> int:
        return len(self._batches)

    def next_update(self, world_size: int, rank: int, accum_steps: int) -> list[Batch]:
        """This rank's micro-batches for the next update. When the epoch has fewer batches left than
        an update needs, the next epoch starts (every rank sees the same counts, so none waits)."""
        needed = world_size * accum_steps
        if self.position + needed > len(self._batches) and self.position > 0:
            self.epoch += 1
            self.position = 0
            self._batches = self._epoch_batches(self.epoch)
        # tiny corpora only: cycle through the epoch's batches to fill the update
        group = update_group(self._batches, self.position, needed)
        self.position += needed
        return ranks_batches(self, group, world_size, rank)

    def epochs_done(self, world_size: int, accum_steps: int) -> int:
        """Epochs fully trained on: the current one counts once the next update would start another."""
        needed = world_size * accum_steps
        ending = self.position > 0 and self.position + needed > len(self._batches)
        return self.epoch if ending else self.epoch - 1

    def state_dict(self) -> dict[str, Any]:
        state = {"epoch": self.epoch, "position": self.position, "seed": self.seed, "batch_tokens": self.batch_tokens}
        if self.shares is not None:  # what the position counts in, besides seed and batch_tokens
            state["directions"] = list(self.split.direction_names)
            state["sampling_temperature"] = self.split.sampling_temperature
        if self.split.corpora is not None:
            state["corpora"] = dict(zip(self.split.corpus_names, self.split.corpus_weights, strict=True))
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        if "buffer" in state:
            raise UserError("this checkpoint was trained with data.streaming=true; resume with it")
        check_same_stream(state, self.batch_tokens, self.seed)
        self._check_same_directions(state)
        check_same_corpora(state, self.split.corpus_names, self.split.corpus_weights)
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._batches = self._epoch_batches(self.epoch)
        if self.corpus_tally is not None:  # the epoch's rows before the position, counted again
            self.corpus_tally = CorpusTally(self.split.corpus_names, self.epoch)
            if self.position:
                self.corpus_tally.add(self.epoch, self.split.corpora[np.concatenate(self._batches[: self.position])])

    def _check_same_directions(self, state: dict[str, Any]) -> None:
        """A multilingual stream resumes only with the directions and temperature its position counts in."""
        now = list(self.split.direction_names) if self.shares is not None else None
        now_temperature = self.split.sampling_temperature if self.shares is not None else None
        saved = state.get("directions")
        if saved != now:
            raise UserError(
                f"resume: data.directions={now} differs from the checkpoint's data.directions={saved}; keep "
                "them, or start a new run with init_from=<checkpoint>"
            )
        if state.get("sampling_temperature") != now_temperature:
            raise UserError(
                f"resume: data.sampling_temperature={now_temperature} differs from the checkpoint's "
                f"{state.get('sampling_temperature')}; keep it, or start a new run with init_from=<checkpoint>"
            )
