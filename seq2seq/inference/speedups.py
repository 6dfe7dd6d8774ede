"""The search's CPU speed-ups, kept out of the algorithms in `seq2seq.inference.search`. Each one
returns what the plain computation it replaces returns (up to the order of tied values), with the
reason for it; the measurements behind them are in docs/performance.md, "Measurements behind the code"."""

from __future__ import annotations

import torch


def best_continuations(
    log_probs: torch.Tensor, scores: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The `count` best one-token continuations of each sentence in beam search. scores: (B, k) of
    the live prefixes; log_probs: (B*k, V) of their next tokens. Returns (B, count) each: the
    continuation's score (prefix score + token log-probability), the beam (0..k-1) it extends, the token.

    The same as ranking the full (B, k*V) table of scores[:, :, None] + log_probs, without writing
    (and sorting) it: a sentence's best `count` continuations are among the best `count` of each of
    its k rows, so each row is ranked first."""
    sentences, beam = scores.shape
    per_row = min(count, log_probs.size(-1))
    row_scores, row_tokens = top_k_rows(log_probs, per_row)  # (B*k, n)
    candidates = (scores.view(-1, 1) + row_scores).view(sentences, beam * per_row)
    best, flat = candidates.topk(min(count, beam * per_row), dim=-1)  # (B, count)
    return best, flat // per_row, row_tokens.view(sentences, -1).gather(1, flat)


def top_k_rows(x: torch.Tensor, k: int, width: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """`x.topk(k, dim=-1)` for wide rows (the vocabulary), faster on a CPU (docs/performance.md): the k best
    values of a row lie in the k chunks of `width` values with the highest maxima, so only those
    chunks are ranked. Equal to torch.topk except in the order of tied values."""
    rows, columns = x.shape
    if columns < 4 * k * width:
        return x.topk(k, dim=-1)
    whole = columns // width
    maxima = x[:, : whole * width].view(rows, whole, width).amax(-1)
    if whole * width < columns:
        maxima = torch.cat([maxima, x[:, whole * width :].amax(-1, keepdim=True)], dim=1)
    chunks = maxima.topk(k, dim=-1).indices  # (R, k)
    index = (chunks[:, :, None] * width + torch.arange(width, device=x.device)).view(rows, k * width)
    values = x.gather(1, index.clamp(max=columns - 1)).masked_fill(index >= columns, float("-inf"))
    top, where = values.topk(k, dim=-1)
    return top, index.gather(1, where).clamp(max=columns - 1)  # -inf fillers still name a real column


def rows_to_keep(live: list[int], current: int, multiple: int) -> torch.Tensor | None:
    """Which of the `current` sentences of a batch to go on decoding: the `live` ones, plus finished
    ones as padding up to a multiple of `multiple`; None when that is all of them (nothing to drop).

    With multiple=1 a finished sentence leaves at once. A bf16 model on a CPU gets 16: oneDNN builds
    a kernel for every matrix shape it meets (with a cache of 64), and a batch that shrinks one
    sentence at a time meets a new shape at almost every step: building the kernels then took about
    as long as running them (docs/performance.md, "Measurements behind the code")."""
    size = min(current, -(-len(live) // multiple) * multiple)
    if size == current:
        return None
    live_set = set(live)
    padding = [row for row in range(current) if row not in live_set][: size - len(live)]
    return torch.tensor(sorted(live + padding))
