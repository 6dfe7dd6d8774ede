"""Greedy and beam search (`seq2seq.inference.search`) on a tiny random model, checked against independent
computations: an exhaustive enumeration of every output scored with the model's full teacher-forced
forward pass, a greedy decoder written with full forward passes, and one-sentence-at-a-time runs."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from seq2seq.config import ModelConfig
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.inference.search import Hypothesis, beam_search, greedy_search
from seq2seq.inference.speedups import rows_to_keep, top_k_rows
from seq2seq.inference.translator_api import output_budget
from seq2seq.model.transformer import Transformer

VOCAB = 7  # 0 pad, 1 bos, 2 eos, 3..6 ordinary tokens
REAL_TOKENS = list(range(3, VOCAB))
ATOL = 1e-4


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matmuls: a second thread only adds contention on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_model(seed: int) -> Transformer:
    """A tiny model in eval mode with peaked output distributions. Its output layer gets a bias
    that keeps some probability on pad/bos (banned in search, the rest renormalised, so a search
    that left them in would score otherwise) and makes EOS less likely, so the best output is not
    always the empty one."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        d_model=16,
        heads=2,
        ffn_dim=32,
        encoder_layers=1,
        decoder_layers=2,
        dropout=0.0,
        max_positions=32,
        tie_output=False,
    )
    model = Transformer(cfg, VOCAB, VOCAB, PAD_ID)
    output = nn.Linear(cfg.d_model, VOCAB)
    with torch.no_grad():
        output.weight.copy_(3.0 * model.output.weight)
        output.bias.copy_(torch.tensor([-2.0, -2.0, -2.0, 0.0, 0.0, 0.0, 0.0]))  # pad, bos, eos, ordinary
    model.output = output
    return model.eval()


def sources() -> torch.Tensor:
    """Three sources of different lengths (each ends with EOS), right-padded."""
    return torch.tensor(
        [
            [3, 4, 5, 6, 4, EOS_ID],
            [5, 3, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
            [6, 6, 4, EOS_ID, PAD_ID, PAD_ID],
        ]
    )


def unpadded(src: torch.Tensor, row: int) -> torch.Tensor:
    """Sentence `row` alone, without padding: (1, its length)."""
    return src[row : row + 1, : int((src[row] != PAD_ID).sum())]


@torch.no_grad()
def sequence_log_probs(
    model: Transformer, src: torch.Tensor, outputs: list[list[int]], max_len: int | None = None
) -> list[float]:
    """Sum of log-probabilities of each output given one source (1, S), from the full teacher-forced
    forward pass, EOS appended; the banned pad/bos tokens taken out and the rest renormalised (as
    CTranslate2 suppresses them, so that both engines rank alike). An output cut at its
    budget (`max_len` tokens counting EOS, so one of max_len - 1 tokens) ends there without EOS: that
    is how CTranslate2 and Hugging Face score a hypothesis that reaches the length limit."""
    scores: dict[int, float] = {}
    for length in {len(tokens) for tokens in outputs}:  # one forward pass per output length
        group = [i for i, tokens in enumerate(outputs) if len(tokens) == length]
        tgt_in = torch.tensor([[BOS_ID, *outputs[i]] for i in group])
        target = torch.tensor([[*outputs[i], EOS_ID] for i in group])
        logits = model(src.expand(len(group), -1), tgt_in)
        logits[:, :, [PAD_ID, BOS_ID]] = float("-inf")
        log_probs = torch.log_softmax(logits, -1)
        terms = log_probs.gather(2, target[:, :, None]).squeeze(2)
        cut = max_len is not None and length == max_len - 1
        sums = terms[:, :length].sum(1) if cut else terms.sum(1)
        scores.update(zip(group, sums.tolist(), strict=True))
    return [scores[i] for i in range(len(outputs))]


def reference_score(log_prob: float, tokens: list[int], max_len: int, length_penalty: float) -> float:
    """log_prob / length^alpha, the length counting EOS, which an output cut at its budget lacks."""
    length = len(tokens) + (0 if len(tokens) == max_len - 1 else 1)
    return log_prob / length**length_penalty if length_penalty and length else log_prob


def all_outputs(max_len: int) -> list[list[int]]:
    """Every output of at most max_len tokens counting EOS: ordinary tokens, then EOS."""
    return [list(seq) for n in range(max_len) for seq in itertools.product(REAL_TOKENS, repeat=n)]


@torch.no_grad()
def reference_greedy(model: Transformer, src: torch.Tensor, max_len: int) -> list[int]:
    """Greedy decoding with one full forward pass per step: argmax over tokens other than pad/bos,
    EOS forced once the budget (EOS included) is reached."""
    tokens: list[int] = []
    while True:
        tgt_in = torch.tensor([[BOS_ID, *tokens]])
        logits = model(src, tgt_in)[0, -1]
        logits[[PAD_ID, BOS_ID]] = float("-inf")
        if len(tokens) + 1 >= max_len:
            return tokens
        token = int(logits.argmax())
        if token == EOS_ID:
            return tokens
        tokens.append(token)


def penalise_eos(model: Transformer, penalty: float = 50.0) -> None:
    """Makes EOS (almost) never the model's choice, so the length budget is what stops decoding."""
    step = model.decode_step

    def decode_step(tokens: torch.Tensor, state: object) -> torch.Tensor:
        log_probs = step(tokens, state)
        log_probs[:, EOS_ID] -= penalty
        return log_probs

    model.decode_step = decode_step  # type: ignore[method-assign]


def budgets(src: torch.Tensor, a: float, b: int, limit: int) -> torch.Tensor:
    """Each sentence's output budget as both engines compute it (`output_budget`); a row of src ends in EOS."""
    return torch.tensor([output_budget(int(n) - 1, 0, a, b, limit) for n in (src != PAD_ID).sum(dim=1)])


@pytest.mark.parametrize("seed", range(4))
def test_greedy_matches_full_forward_greedy(seed: int) -> None:
    model, src = make_model(seed), sources()
    max_len = torch.tensor([7, 4, 5])
    results = greedy_search(model, src, BOS_ID, EOS_ID, max_len)
    for row, hyp in enumerate(results):
        single = unpadded(src, row)
        assert hyp.tokens == reference_greedy(model, single, int(max_len[row]))
        limit = int(max_len[row])
        assert hyp.score == pytest.approx(sequence_log_probs(model, single, [hyp.tokens], limit)[0], abs=ATOL)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("seed", range(8))
def test_beam_one_is_greedy(seed: int, length_penalty: float) -> None:
    model, src = make_model(seed), sources()
    max_len = torch.tensor([7, 5, 6])
    greedy = greedy_search(model, src, BOS_ID, EOS_ID, max_len)
    beam = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=1, length_penalty=length_penalty)
    for g, (b,), limit in zip(greedy, beam, max_len.tolist(), strict=True):
        assert b.tokens == g.tokens
        # Greedy reports the raw log-probability, beam search divides it by length^alpha (EOS counted).
        assert b.score == pytest.approx(reference_score(g.score, g.tokens, limit, length_penalty), abs=ATOL)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
def test_scores_mean_the_same_in_greedy_and_beam_search(length_penalty: float) -> None:
    """`log_prob` is the output's log-probability (EOS included) in both searches, and `score` is it
    divided by length^alpha in both: greedy and beam=1 with the same length penalty agree on both."""
    model, src = make_model(4), sources()
    max_len = torch.tensor([7, 5, 6])
    greedy = greedy_search(model, src, BOS_ID, EOS_ID, max_len, length_penalty)
    beam = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=1, length_penalty=length_penalty)
    for row, (g, (b,)) in enumerate(zip(greedy, beam, strict=True)):
        assert g.tokens == b.tokens
        limit = int(max_len[row])
        (raw,) = sequence_log_probs(model, unpadded(src, row), [g.tokens], limit)
        for hyp in (g, b):
            assert hyp.log_prob == pytest.approx(raw, abs=ATOL)
            assert hyp.score == pytest.approx(reference_score(raw, hyp.tokens, limit, length_penalty), abs=ATOL)


EXHAUSTIVE_SEEDS = (1, 3, 5)  # models whose best outputs have various lengths (see the guard below)


def exhaustive_scores(model: Transformer, src: torch.Tensor, max_len: int) -> dict[tuple[int, ...], float]:
    outputs = all_outputs(max_len)
    return dict(zip(map(tuple, outputs), sequence_log_probs(model, src, outputs, max_len), strict=True))


@pytest.mark.parametrize("seed", EXHAUSTIVE_SEEDS)
def test_wide_beam_finds_exhaustive_best(seed: int) -> None:
    model, src = make_model(seed), sources()
    max_len = torch.tensor([4, 3, 4])
    wide = len(all_outputs(4))  # 1 + 4 + 16 + 64 = 85 outputs
    results = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=wide, length_penalty=0.0, nbest=wide)
    for row, nbest in enumerate(results):
        exhaustive = exhaustive_scores(model, unpadded(src, row), int(max_len[row]))
        best = max(exhaustive, key=exhaustive.__getitem__)
        assert nbest[0].tokens == list(best)
        assert nbest[0].score == pytest.approx(exhaustive[best], abs=ATOL)
        # The beam holds every output: the ranked list is the whole exhaustive one.
        assert sorted(tuple(h.tokens) for h in nbest) == sorted(exhaustive)
        for hyp in nbest:
            assert hyp.score == pytest.approx(exhaustive[tuple(hyp.tokens)], abs=ATOL)


def test_exhaustive_cases_are_not_trivial() -> None:
    """Guards the test above: the best outputs are not all empty, and greedy misses some of them."""
    best_lengths, greedy_misses = set(), 0
    src, max_len = sources(), torch.tensor([4, 3, 4])
    for seed in EXHAUSTIVE_SEEDS:
        model = make_model(seed)
        greedy = greedy_search(model, src, BOS_ID, EOS_ID, max_len)
        for row in range(src.size(0)):
            exhaustive = exhaustive_scores(model, unpadded(src, row), int(max_len[row]))
            best = max(exhaustive, key=exhaustive.__getitem__)
            best_lengths.add(len(best))
            greedy_misses += list(best) != greedy[row].tokens
    assert len(best_lengths) >= 3
    assert greedy_misses > 0


@pytest.mark.parametrize("length_penalty", [1.0, 0.6])
def test_beam_scores_are_length_normalised_log_probs(length_penalty: float) -> None:
    model, src = make_model(1), sources()
    max_len = torch.tensor([7, 5, 6])
    results = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=4, length_penalty=length_penalty, nbest=3)
    for row, nbest in enumerate(results):
        limit = int(max_len[row])
        raw = sequence_log_probs(model, unpadded(src, row), [h.tokens for h in nbest], limit)
        for hyp, log_prob in zip(nbest, raw, strict=True):
            assert hyp.score == pytest.approx(reference_score(log_prob, hyp.tokens, limit, length_penalty), abs=ATOL)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_nbest_sorted_and_distinct(length_penalty: float) -> None:
    model, src = make_model(2), sources()
    max_len = torch.tensor([7, 5, 6])
    results = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=5, length_penalty=length_penalty, nbest=5)
    for nbest in results:
        assert len(nbest) == 5
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == len(nbest)


def check_outputs(hyps: list[Hypothesis], max_len: torch.Tensor) -> None:
    for hyp, limit in zip(hyps, max_len.tolist(), strict=True):
        assert len(hyp.tokens) + 1 <= limit  # the budget counts EOS
        assert not {PAD_ID, BOS_ID, EOS_ID} & set(hyp.tokens)
        assert math.isfinite(hyp.score)


@pytest.mark.parametrize("seed", range(3))
def test_outputs_within_budget_and_free_of_specials(seed: int) -> None:
    model = make_model(seed)
    torch.manual_seed(100 + seed)
    src = torch.randint(0, VOCAB, (5, 8))  # may contain any id, pad included
    src[:, 0] = 3
    max_len = budgets(src, 1.0, 1, 6)
    check_outputs(greedy_search(model, src, BOS_ID, EOS_ID, max_len), max_len)
    for nbest in zip(
        *beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=3, length_penalty=1.0, nbest=3), strict=True
    ):
        check_outputs(list(nbest), max_len)


def test_budget_stops_decoding_when_eos_is_unlikely() -> None:
    model, src = make_model(0), sources()
    penalise_eos(model)
    max_len = torch.tensor([5, 2, 4])
    for hyp, limit in zip(greedy_search(model, src, BOS_ID, EOS_ID, max_len), max_len.tolist(), strict=True):
        assert len(hyp.tokens) == limit - 1
        assert math.isfinite(hyp.score)
    for nbest, limit in zip(
        beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=3, nbest=2), max_len.tolist(), strict=True
    ):
        assert [len(h.tokens) for h in nbest] == [limit - 1] * 2
        assert all(math.isfinite(h.score) for h in nbest)


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_batch_equals_one_sentence_at_a_time(beam: int, length_penalty: float) -> None:
    model, src = make_model(3), sources()
    max_len = torch.tensor([7, 4, 6])
    batched = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam=beam, length_penalty=length_penalty, nbest=beam)
    greedy = greedy_search(model, src, BOS_ID, EOS_ID, max_len)
    for row in range(src.size(0)):
        single = unpadded(src, row)
        alone = beam_search(model, single, BOS_ID, EOS_ID, max_len[row : row + 1], beam, length_penalty, nbest=beam)[0]
        assert [h.tokens for h in batched[row]] == [h.tokens for h in alone]
        assert [h.score for h in batched[row]] == pytest.approx([h.score for h in alone], abs=ATOL)
        (greedy_alone,) = greedy_search(model, single, BOS_ID, EOS_ID, max_len[row : row + 1])
        assert greedy[row].tokens == greedy_alone.tokens
        assert greedy[row].score == pytest.approx(greedy_alone.score, abs=ATOL)


@pytest.mark.parametrize("beam", [1, 3])
def test_padding_the_batch_with_finished_sentences_changes_nothing(beam: int) -> None:
    """row_multiple keeps finished sentences in the batch (as padding to a multiple of 3 here) instead
    of dropping each at once: same hypotheses and scores, and nothing added to a sentence once done."""
    model = make_model(5)
    torch.manual_seed(5)
    lengths = [6, 2, 5, 3, 4, 6, 2]
    src = torch.full((len(lengths), max(lengths)), PAD_ID)
    for row, n in enumerate(lengths):
        src[row, : n - 1] = torch.randint(3, VOCAB, (n - 1,))
        src[row, n - 1] = EOS_ID
    max_len = torch.tensor([8, 3, 7, 4, 6, 9, 2])
    for search in ("greedy", "beam"):
        if search == "greedy":
            plain = [[h] for h in greedy_search(model, src, BOS_ID, EOS_ID, max_len)]
            padded = [[h] for h in greedy_search(model, src, BOS_ID, EOS_ID, max_len, row_multiple=3)]
        else:
            plain = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam, 1.0, nbest=beam)
            padded = beam_search(model, src, BOS_ID, EOS_ID, max_len, beam, 1.0, nbest=beam, row_multiple=3)
        for mine, reference in zip(padded, plain, strict=True):
            assert [h.tokens for h in mine] == [h.tokens for h in reference]
            assert [h.score for h in mine] == pytest.approx([h.score for h in reference], abs=ATOL)


def test_rows_to_keep_pads_with_finished_rows() -> None:
    assert rows_to_keep([0, 2, 5], current=8, multiple=4).tolist() == [0, 1, 2, 5]
    assert rows_to_keep([0, 2, 5], current=8, multiple=1).tolist() == [0, 2, 5]
    assert rows_to_keep([1, 3], current=4, multiple=4) is None  # padding would keep all: nothing to do


@pytest.mark.parametrize("columns", [8000, 8003, 1300])
def test_top_k_rows_equals_torch_topk(columns: int) -> None:
    """The chunked top-k of wide rows against torch.topk, with a partial last chunk (8003, 1300), rows
    that are -inf except for one value (a sentence out of budget), and values spread across chunks."""
    assert columns >= 4 * 10 * 32  # wide enough to be chunked: narrower rows are torch.topk itself
    torch.manual_seed(0)
    x = torch.randn(37, columns) * 3
    x[5] = float("-inf")
    x[5, columns - 1] = 0.0
    x[6, :: columns // 9] = 50.0 + torch.arange(len(range(0, columns, columns // 9)), dtype=torch.float)
    values, index = top_k_rows(x, 10)
    expected_values, expected_index = x.topk(10, dim=-1)
    torch.testing.assert_close(values, expected_values, atol=0, rtol=0)
    assert torch.equal(index[values > float("-inf")], expected_index[expected_values > float("-inf")])
    finite = values > float("-inf")
    assert torch.equal(x.gather(1, index)[finite], values[finite]) and int(index.max()) < columns


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2, 23])
def test_the_best_hypothesis_does_not_depend_on_nbest(seed: int, length_penalty: float) -> None:
    """Regression: with a length penalty a sentence stopped once `nbest` hypotheses were finished, so
    asking for more hypotheses could find a better first one (it did for seed 2 with alpha 1, where
    nbest=1 gave the empty output, and seed 23 with alpha 2)."""
    model, src = make_model(seed), sources()
    max_len = torch.tensor([20, 20, 20])
    runs = {n: beam_search(model, src, BOS_ID, EOS_ID, max_len, 5, length_penalty, nbest=n) for n in range(1, 6)}
    for n, results in runs.items():
        for row, hyps in enumerate(results):
            assert len(hyps) == n
            assert (hyps[0].tokens, hyps[0].score) == (runs[5][row][0].tokens, runs[5][row][0].score), (n, row)


def test_beam_search_decodes_one_row_per_sentence_at_the_first_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the first step a sentence's k beams would all be BOS: one decoder row each, then k."""
    model, src = make_model(0), sources()
    rows = []
    step = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda tokens, state: rows.append(len(tokens)) or step(tokens, state))
    beam_search(model, src, BOS_ID, EOS_ID, budgets(src, 1.5, 6, 64), 3)
    assert rows[:2] == [src.size(0), 3 * src.size(0)]  # what the search finds: the exhaustive tests above


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0])
def test_a_given_tag_counts_neither_in_the_score_nor_in_the_length(length_penalty: float) -> None:
    """A decoder_start tag is given, not predicted (62.7): an empty output right after it scores as an
    empty output of an untagged model, log P(</s>) / 1, and a longer one by its predicted tokens + 1."""
    tag = 7
    assert Hypothesis.scored([tag], -2.0, length_penalty, given=1).score == -2.0
    assert (
        Hypothesis.scored([tag], -2.0, length_penalty, given=1).score
        == Hypothesis.scored([], -2.0, length_penalty).score
    )
    assert Hypothesis.scored([tag, 5, 6], -3.0, length_penalty, given=1).score == pytest.approx(
        -3.0 / 3**length_penalty
    )
    cut = Hypothesis.scored([tag, 5, 6], -3.0, length_penalty, cut=True, given=1)  # no </s>: 2 predicted tokens
    assert cut.score == pytest.approx(-3.0 / 2**length_penalty)
