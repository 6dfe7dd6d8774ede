"""Sampling, ensembles and forced prefixes, each against an independent computation: full teacher-forced
forward passes, a greedy decoder that feeds the prefix by hand, frequencies of the model's own
distribution, an ensemble's mean probability computed from its members."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from test_sampling import CHI2_999, chi_square
from test_search import (
    budgets,
    make_model,
    one_thread,  # noqa: F401  (autouse: tiny matmuls, one thread)
    reference_greedy,
    reference_score,
    sequence_log_probs,
    sources,
    unpadded,
)

from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.search import beam_search, greedy_search

ATOL = 1e-4


def budget(src: torch.Tensor) -> torch.Tensor:
    return budgets(src, 1.5, 3, 32)


def forced_prefixes(prefixes: list[list[int]]) -> torch.Tensor:
    forced = torch.full((len(prefixes), max(map(len, prefixes))), -1, dtype=torch.long)
    for row, prefix in enumerate(prefixes):
        forced[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    return forced


# --- sampling --------------------------------------------------------------------------------------


def test_sampling_with_top_k_one_is_greedy() -> None:
    model, src = make_model(0), sources()
    greedy = greedy_search(model, src, BOS_ID, EOS_ID, budget(src))
    sampled = greedy_search(
        model, src, BOS_ID, EOS_ID, budget(src), sampling=SamplingRule(top_k=1), generator=torch.Generator()
    )
    assert [h.tokens for h in sampled] == [h.tokens for h in greedy]
    assert [h.log_prob for h in sampled] == pytest.approx([h.log_prob for h in greedy], abs=ATOL)


@torch.no_grad()
def test_sampled_first_tokens_follow_the_model_distribution_and_scores_are_the_models() -> None:
    model, draws = make_model(1), 20_000
    src = unpadded(sources(), 0)
    # The model's next-token distribution after BOS, from a full forward pass; pad and BOS are
    # banned (the sampler renormalises over the rest).
    logits = model(src, torch.tensor([[BOS_ID]]))[0, -1]
    logits[[PAD_ID, BOS_ID]] = float("-inf")
    expected = logits.softmax(-1).tolist()
    many = src.expand(draws, -1)
    hyps = greedy_search(
        model, many, BOS_ID, EOS_ID, budget(many), sampling=SamplingRule(), generator=torch.Generator().manual_seed(0)
    )
    first = torch.tensor([h.tokens[0] if h.tokens else EOS_ID for h in hyps])
    observed = torch.bincount(first, minlength=len(expected)).double()
    assert chi_square(observed, expected) < CHI2_999[len([p for p in expected if p > 0]) - 1]
    # A sample's log_prob is the model's log-probability of it (not the sampler's tempered one).
    some = hyps[:5]
    assert [h.log_prob for h in some] == pytest.approx(
        sequence_log_probs(model, src, [h.tokens for h in some]), abs=ATOL
    )


# --- ensembles -------------------------------------------------------------------------------------


def test_an_ensemble_of_a_model_with_itself_decodes_as_the_model() -> None:
    model, src = make_model(2), sources()
    twice = Ensemble([model, copy.deepcopy(model)]).eval()
    for search in (
        lambda m: [[h] for h in greedy_search(m, src, BOS_ID, EOS_ID, budget(src))],
        lambda m: beam_search(m, src, BOS_ID, EOS_ID, budget(src), beam=3, nbest=3),
    ):
        alone, ensemble = search(model), search(twice)
        assert [[h.tokens for h in n] for n in ensemble] == [[h.tokens for h in n] for n in alone]
        for a, e in zip(alone, ensemble, strict=True):
            assert [h.score for h in e] == pytest.approx([h.score for h in a], abs=ATOL)


@torch.no_grad()
def test_an_ensemble_step_is_the_log_of_the_members_mean_probability() -> None:
    members = [make_model(3), make_model(4), make_model(5)]
    ensemble, src = Ensemble(members).eval(), sources()
    prefix = torch.tensor([[BOS_ID, 4, 5, 3]] * src.size(0))
    state = ensemble.start_decoding(src)
    for step in range(prefix.size(1)):
        got = ensemble.decode_step(prefix[:, step], state)
    # Independently: each member's full forward pass over the whole prefix, probabilities averaged.
    probs = torch.stack([torch.softmax(m(src, prefix)[:, -1].float(), -1) for m in members]).mean(0)
    torch.testing.assert_close(got, probs.log(), atol=ATOL, rtol=0.0)
    # And beam search over the ensemble ranks by those probabilities, pad and <s> (no outputs) left
    # out and the rest renormalised: its best hypothesis's log_prob is the sum of their logs along it.
    max_len = budget(src)
    best = beam_search(ensemble, src, BOS_ID, EOS_ID, max_len, beam=2)
    for row, nbest in enumerate(best):
        tokens, one = nbest[0].tokens, unpadded(src, row)
        tgt_in = torch.tensor([[BOS_ID, *tokens]])
        mean = torch.stack([torch.softmax(m(one, tgt_in)[0].float(), -1) for m in members]).mean(0)
        mean[:, [PAD_ID, BOS_ID]] = 0.0
        mean = mean / mean.sum(-1, keepdim=True)
        terms = mean.log().gather(1, torch.tensor([*tokens, EOS_ID])[:, None])
        cut = len(tokens) == int(max_len[row]) - 1  # a line cut at its budget has no EOS term
        expected = terms[: len(tokens)].sum() if cut else terms.sum()
        assert nbest[0].log_prob == pytest.approx(float(expected), abs=ATOL)


# --- forced prefixes -------------------------------------------------------------------------------


@torch.no_grad()
def reference_greedy_after(model: torch.nn.Module, src: torch.Tensor, prefix: list[int], max_len: int) -> list[int]:
    """Greedy decoding by hand with the prefix fed as if the decoder had chosen it: full forward
    passes, argmax over tokens other than pad/bos, EOS forced once the budget is reached."""
    tokens = list(prefix)
    while len(tokens) + 1 < max_len:
        logits = model(src, torch.tensor([[BOS_ID, *tokens]]))[0, -1]
        logits[[PAD_ID, BOS_ID]] = float("-inf")
        token = int(logits.argmax())
        if token == EOS_ID:
            break
        tokens.append(token)
    return tokens


def test_a_forced_prefix_is_reproduced_and_greedy_continues_as_if_fed_by_hand() -> None:
    model, src = make_model(6), sources()
    prefixes = [[6, 6, 6], [], [4]]  # the middle sentence has none
    max_len = budget(src)
    hyps = greedy_search(model, src, BOS_ID, EOS_ID, max_len, forced=forced_prefixes(prefixes))
    for row, (hyp, prefix) in enumerate(zip(hyps, prefixes, strict=True)):
        assert hyp.tokens[: len(prefix)] == prefix
        assert hyp.tokens == reference_greedy_after(model, unpadded(src, row), prefix, int(max_len[row]))
        limit = int(max_len[row])
        assert hyp.log_prob == pytest.approx(
            sequence_log_probs(model, unpadded(src, row), [hyp.tokens], limit)[0], abs=ATOL
        )
    # Without a prefix the middle sentence decodes exactly as plain greedy does.
    assert hyps[1].tokens == reference_greedy(model, unpadded(src, 1), int(max_len[1]))


def test_beam_search_keeps_the_prefix_and_its_best_beats_every_continuation_greedy_finds() -> None:
    model, src = make_model(7), sources()
    prefixes = [[5, 5], [3], [6, 4, 3]]
    max_len = budget(src)
    nbest = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=4, nbest=4, forced=forced_prefixes(prefixes))
    for row, (hyps, prefix) in enumerate(zip(nbest, prefixes, strict=True)):
        one = unpadded(src, row)
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps)
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)  # distinct hypotheses, not copies of one
        # Each hypothesis's log_prob is the model's, prefix tokens included (full forward pass).
        limit = int(max_len[row])
        assert [h.log_prob for h in hyps] == pytest.approx(
            sequence_log_probs(model, one, [h.tokens for h in hyps], limit), abs=ATOL
        )
        # With the prefix fed by hand, greedy's continuation scores no better than the beam's best.
        greedy = reference_greedy_after(model, one, prefix, limit)
        greedy_score = reference_score(sequence_log_probs(model, one, [greedy], limit)[0], greedy, limit, 1.0)
        assert hyps[0].score >= greedy_score - ATOL


def test_ensemble_members_must_share_a_vocabulary() -> None:
    small = make_model(0)
    other = copy.deepcopy(small)
    other.output = torch.nn.Linear(16, 9)
    with pytest.raises(ValueError, match="one target vocabulary"):
        Ensemble([small, other])
    assert math.isclose(Ensemble([small, small]).max_positions, small.cfg.max_positions)
