"""Greedy and beam search over the model's incremental decoding step (key/value cache).

Both work on a batch of sentences at once and drop a sentence from the batch as soon as it is
finished, so no compute is spent on sentences (or beams) that are done. Beam search's bookkeeping
is `Beams`, its stopping rule `sentence_done`; the CPU speed-ups both use are in
`seq2seq.inference.speedups`. What a score means is said once, in `Hypothesis`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

from seq2seq.data.tokenizer import banned_outputs
from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.speedups import best_continuations, rows_to_keep
from seq2seq.model.kv_cache import DecoderState
from seq2seq.model.transformer import Transformer

NEG_INF = float("-inf")


class SearchRules(enum.Enum):
    """Whose rules a search follows where CTranslate2's search and transformers' `generate` differ
    (read in CTranslate2's src/decoding.cc and transformers' `_beam_search`; docs/huggingface.md).

    CTRANSLATE2 (every run of this project's own layout): a hypothesis's length leaves a given
    decoder_start tag out and counts a cut line without </s> (`Hypothesis`); pad and <s> are banned
    before the softmax (renormalised, as its suppress_sequences); after a forced prefix only the best
    candidate may end the line (`end_after_prefix_from_the_best_only`); at the budget's last token the
    top `beam` candidates all end (`Beams.finish`'s `last`).

    GENERATE (a pretrained NLLB-200/M2M-100/mBART-50 model's layout, data.lang_tag=language_codes,
    decoded as transformers' `generate` decodes it): the length counts the forced language code and a
    cut line's </s> (the one its forced_eos_token_id puts at the budget); the bans come after the
    softmax, unrenormalised; neither of CTranslate2's two step rules.

    CTRANSLATE2_WITH_GENERATE_LENGTHS: CTranslate2's steps and renormalised bans with generate's lengths:
    what `CTranslate2Translator` writes for such a model's export, whose finished lines it ranks by
    generate's lengths (tests/test_m2m100_export.py)."""

    CTRANSLATE2 = "ctranslate2"
    GENERATE = "generate"
    CTRANSLATE2_WITH_GENERATE_LENGTHS = "ctranslate2_with_generate_lengths"

    @property
    def generate_lengths(self) -> bool:
        """The length a score is divided by counts the given tokens and a cut line's </s>."""
        return self is not SearchRules.CTRANSLATE2

    @property
    def ctranslate2_steps(self) -> bool:
        """The end right after a forced prefix from the best candidate only, and the top `beam`
        candidates all ending at the budget's last token."""
        return self is not SearchRules.GENERATE

    @property
    def renormalises(self) -> bool:
        """The default of `renormalise` (`_next_log_probs`): the bans before the softmax."""
        return self is not SearchRules.GENERATE


@dataclass
class Hypothesis:
    """A finished output and how likely the model finds it, the same in greedy and beam search.

    log_prob: log P(tokens + EOS | source), the sum of the model's log-probabilities of each output
        token and of the final EOS (pad and BOS are left out of each softmax, as CTranslate2 suppresses them: see `_next_log_probs`);
        for a line cut at its output budget, of its tokens alone (see `Beams.finish`). A given token (a
        decoder_start language tag: see `force_prefix`) adds nothing.
    score: what hypotheses are ranked by, log_prob / length ** length_penalty, where length counts
        the predicted tokens and the EOS: len(tokens) - given + 1 (a cut line has no EOS). The tag is
        given, not predicted, so it counts in neither (as fairseq's language token as BOS): an empty
        output after it scores as an empty output of an untagged model, log P(EOS) / 1. With
        length_penalty 0 the score is log_prob itself; -inf for a sentence without output.
    """

    tokens: list[int]  # without BOS and EOS
    log_prob: float
    score: float

    @classmethod
    def scored(
        cls,
        tokens: list[int],
        log_prob: float,
        length_penalty: float,
        cut: bool = False,
        given: int = 0,
        rules: SearchRules = SearchRules.CTRANSLATE2,
    ) -> Hypothesis:
        """`cut`: the line reached its output budget and ends without EOS (see `_only_eos`); `given`:
        how many of the first tokens were given, not predicted (a decoder_start tag); `rules` with
        generate's lengths (`SearchRules.generate_lengths`): the length counts them all the same, and
        a cut line's closing </s>, as transformers' `generate` counts a forced language code and the
        </s> its forced_eos_token_id puts at the budget (a pretrained NLLB-200/M2M-100/mBART-50 model's
        layout, data.lang_tag=language_codes)."""
        if rules.generate_lengths:
            length = len(tokens) + 1
        else:
            length = len(tokens) - given + (0 if cut else 1)
        return cls(tokens, log_prob, log_prob / (length**length_penalty) if length_penalty and length else log_prob)


def _next_log_probs(
    model: Transformer, tokens: torch.Tensor, state: DecoderState, bos: int, renormalise: bool = True
) -> torch.Tensor:
    """One decoding step; padding and the start token (BOS, where the start is EOS) are never valid
    outputs: banned, and the rest renormalised. Without renormalising, a prefix after which the model gave
    them more probability scored lower than under CTranslate2's suppress_sequences, and a young model's
    beams ranked otherwise there. `renormalise=False`: transformers' `generate` rule
    (`SearchRules.GENERATE`: a pretrained NLLB-200/M2M-100/mBART-50 model), banned after the softmax. A pruned
    vocabulary (data.prune_vocab) renormalises, as its Hugging Face export's `generate` does (its
    renormalize_logits, seq2seq.artifacts.vocab_rows)."""
    log_probs = model.decode_step(tokens, state)
    log_probs[:, banned_outputs(bos)] = NEG_INF
    return log_probs - log_probs.logsumexp(dim=-1, keepdim=True) if renormalise else log_probs


def _only_eos(log_probs: torch.Tensor, rows: torch.Tensor, eos: int) -> None:
    """Rows where `rows` (bool) is True are out of budget: the line is cut here. EOS is their only
    continuation and costs nothing, so a cut hypothesis scores as its tokens alone: that is how
    CTranslate2 scores one that reaches max_decoding_length. Greedy search cuts every line so; beam
    search ends a line at its last token instead (`Beams.finish`) and comes here only for a budget of
    one token, which leaves room for nothing but the cut."""
    if bool(rows.any()):
        not_eos = torch.arange(log_probs.size(1), device=log_probs.device) != eos
        log_probs.masked_fill_(rows[:, None] & not_eos, NEG_INF)
        log_probs[rows, eos] = 0.0


def force_prefix(
    log_probs: torch.Tensor, forced: torch.Tensor | None, sentences: torch.Tensor, step: int, given: int = 0
) -> None:
    """A forced target prefix: rows whose sentence still has a prefix token at `step` may only output
    it, with the model's log-probability (so a hypothesis's score stays log P of all its tokens).
    forced: (B, P) token ids per original sentence, -1 after each prefix's end; sentences: (R,) the
    original sentence of each row. The first `given` steps are given, not predicted, and cost nothing:
    a decoder_start language tag, which training never asks the model to predict (CTranslate2 leaves
    a target_prefix's log-probabilities out of its score alike)."""
    if forced is None or step >= forced.size(1):
        return
    tokens = forced[sentences, step]  # (R,)
    rows = tokens >= 0
    if bool(rows.any()):
        wanted = tokens[rows, None]
        kept = log_probs[rows].gather(1, wanted) if step >= given else torch.zeros_like(wanted, dtype=log_probs.dtype)
        log_probs[rows] = torch.full_like(log_probs[rows], NEG_INF).scatter_(1, wanted, kept)


@torch.inference_mode()
def greedy_search(
    model: Transformer,
    src: torch.Tensor,
    bos: int,
    eos: int,
    max_len: torch.Tensor,
    length_penalty: float = 0.0,
    row_multiple: int = 1,
    forced: torch.Tensor | None = None,
    sampling: SamplingRule | None = None,
    generator: torch.Generator | None = None,
    given: int = 0,
    rules: SearchRules = SearchRules.CTRANSLATE2,
    renormalise: bool | None = None,
) -> list[Hypothesis]:
    """src: (B, S) ids -> the most likely next token at every step, for each sentence; with a
    `sampling` rule, a token drawn from the model's (filtered) distribution instead (`generator`
    seeds it). The tokens do not depend on `length_penalty`: it only sets the hypotheses' `score`,
    which is the model's own log-probability either way (not the tempered one). `forced`: a target
    prefix per sentence (see `force_prefix`; `given`: its first steps that cost nothing). `rules`: the
    lengths hypotheses are scored by (`SearchRules`; CTranslate2's two step rules cannot change a
    greedy line). Sentences leave the batch as they finish, in steps of `row_multiple` (see
    `rows_to_keep`). `renormalise`: see `_next_log_probs`; by default as `rules` says
    (`SearchRules.renormalises`)."""
    renormalise = rules.renormalises if renormalise is None else renormalise
    batch = src.size(0)
    state = model.start_decoding(src)
    alive = torch.arange(batch, device=src.device)  # original index of each row still decoding
    tokens = torch.full((batch,), bos, dtype=torch.long, device=src.device)
    log_prob = torch.zeros(batch, device=src.device)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    results: list[Hypothesis | None] = [None] * batch
    limits = max_len.tolist()
    for step in range(int(max_len.max())):
        log_probs = _next_log_probs(model, tokens, state, bos, renormalise)  # (B_alive, V)
        _only_eos(log_probs, max_len[alive] <= step + 1, eos)
        force_prefix(log_probs, forced, alive, step, given)
        if sampling is None:
            best, tokens = log_probs.max(dim=-1)
        else:
            tokens = sampling.sample(log_probs, generator)
            best = log_probs.gather(1, tokens[:, None]).squeeze(1)
        log_prob = log_prob + best
        live = []
        for row, (index, token) in enumerate(zip(alive.tolist(), tokens.tolist(), strict=True)):
            if results[index] is not None:  # finished earlier, kept as padding
                continue
            if token == eos:
                cut = limits[index] <= step + 1
                results[index] = Hypothesis.scored(
                    outputs[index], float(log_prob[row]), length_penalty, cut, given, rules
                )
            else:
                outputs[index].append(token)
                live.append(row)
        if not live:
            break
        keep = rows_to_keep(live, len(alive), row_multiple)
        if keep is not None:
            keep = keep.to(src.device)
            state.select_sentences(keep)
            alive, tokens, log_prob = alive[keep], tokens[keep], log_prob[keep]
    return [r if r is not None else Hypothesis(outputs[i], NEG_INF, NEG_INF) for i, r in enumerate(results)]


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: torch.Tensor,
    bos: int,
    eos: int,
    max_len: torch.Tensor,
    beam: int,
    length_penalty: float = 1.0,
    nbest: int = 1,
    row_multiple: int = 1,
    forced: torch.Tensor | None = None,
    given: int = 0,
    rules: SearchRules = SearchRules.CTRANSLATE2,
    renormalise: bool | None = None,
) -> list[list[Hypothesis]]:
    """Keeps the `beam` most likely prefixes per sentence and returns its `nbest` best finished
    hypotheses, best `score` first. A prefix that ends with EOS among the top `beam` candidates is
    finished (so beam=1 is exactly greedy); a sentence is done when `sentence_done` says so, or at
    its budget's last token, where its top `beam` candidates all end (`Beams.finish`).
    Sentences leave the batch as they are done, in steps of `row_multiple` (see `rows_to_keep`).
    `forced`: a target prefix per sentence (see `force_prefix`); while it lasts a sentence has one
    live prefix, as at the start, and right after it only the best candidate may end the line
    (`end_after_prefix_from_the_best_only`) under CTranslate2's rules. `rules`: whose rules the
    search follows where CTranslate2's and transformers' `generate` differ (`SearchRules`: the lengths,
    the bans, the end after a prefix, the last step). `renormalise`: as in `greedy_search`."""
    renormalise = rules.renormalises if renormalise is None else renormalise
    # The first step decodes one row per sentence (its k beams would all be BOS), the next ones k:
    # `beams.rows` decoder rows per sentence, B*rows in all.
    state = model.start_decoding(src)
    beams = Beams(src.size(0), beam, bos, src.device)
    limit = max_len.tolist()
    prefix_length = (forced >= 0).sum(dim=1) if forced is not None else None  # (B,)
    for step in range(int(max_len.max())):
        log_probs = _next_log_probs(model, beams.last_tokens(), state, bos, renormalise)  # (B*rows, V)
        cut = [limit[i] <= step + 1 for i in beams.alive]  # a budget of one: EOS is the cut
        last = [limit[i] <= step + 2 for i in beams.alive]  # each sentence's last token (see Beams.finish)
        if not rules.ctranslate2_steps:  # transformers' generate ends a line at its budget by the forced </s> alone
            last = [False] * len(last)
        at_limit = torch.tensor(cut, device=src.device)
        _only_eos(log_probs, at_limit.repeat_interleave(beams.rows), eos)
        if forced is not None:
            sentence_of_row = torch.tensor(beams.alive, device=src.device).repeat_interleave(beams.rows)
            force_prefix(log_probs, forced, sentence_of_row, step, given)
        cand_scores, cand_beam, cand_token = best_continuations(log_probs, beams.scores, 2 * beam)  # (B, 2k)
        if cand_scores.size(1) < beam:  # the first step of a beam wider than the vocabulary
            cand_scores, cand_beam, cand_token = _pad_candidates(cand_scores, cand_beam, cand_token, beam)
        if prefix_length is not None and rules.ctranslate2_steps:
            lengths = prefix_length[torch.tensor(beams.alive, device=src.device)]
            end_after_prefix_from_the_best_only(
                cand_scores, cand_token, (lengths == step) & (lengths > 0), eos, model.pad_id
            )
        is_eos = cand_token == eos
        beams.finish(cand_scores, cand_beam, cand_token, is_eos, length_penalty, cut, last, given, rules)
        state.reorder_beams(beams.extend(cand_scores, cand_beam, cand_token, is_eos), group=beam)
        best_live = beams.best_live()
        done = [
            i in beams.closed
            or last[row]
            or sentence_done(beams.finished[i], best_live[row], length_penalty, nbest, beam)
            for row, i in enumerate(beams.alive)
        ]
        if all(done):
            break
        beams.closed.update(i for i, d in zip(beams.alive, done, strict=True) if d)
        keep = rows_to_keep([row for row, d in enumerate(done) if not d], len(done), row_multiple)
        if keep is not None:
            keep = keep.to(src.device)
            beams.keep(keep, state.rows_of(keep))
            state.select_sentences(keep)
    return beams.results(nbest)


def end_after_prefix_from_the_best_only(
    cand_scores: torch.Tensor, cand_token: torch.Tensor, rows: torch.Tensor, eos: int, dead_token: int
) -> None:
    """CTranslate2's rule for the first step after a forced prefix (its issue #277), so that both
    engines search alike: only a sentence's best candidate may end the line there. A lower-ranked EOS
    would finish an empty (or prefix-only) line from a secondary beam before the beam has spread, and
    with a length penalty such short lines win. That EOS becomes a dead candidate (score -inf, token
    `dead_token`: pad, as CTranslate2's id 0) that keeps its rank, so it takes one live beam's place, as
    there. cand_scores, cand_token: (B, 2k), best first; rows: (B,) bool, the sentences at that step."""
    lower = (cand_token == eos) & rows[:, None]
    lower[:, 0] = False
    if bool(lower.any()):
        cand_scores.masked_fill_(lower, NEG_INF)
        cand_token.masked_fill_(lower, dead_token)


def _pad_candidates(
    scores: torch.Tensor, beams: torch.Tensor, tokens: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates padded to `width` columns with impossible ones (-inf, beam 0, token 0), which stay
    dead, as the copies of the first beam did when every beam was decoded at the first step."""
    missing = width - scores.size(1)
    return (
        torch.cat([scores, scores.new_full((scores.size(0), missing), NEG_INF)], dim=1),
        torch.cat([beams, beams.new_zeros(beams.size(0), missing)], dim=1),
        torch.cat([tokens, tokens.new_zeros(tokens.size(0), missing)], dim=1),
    )


def sentence_done(finished: list[Hypothesis], best_live: float, length_penalty: float, nbest: int, beam: int) -> bool:
    """Beam search's stopping rule for one sentence, given its finished hypotheses and the
    log-probability of its best live prefix.

    Without a length penalty a sentence is done when its `nbest`-th best finished score is at least
    its best live prefix's: exact, since log-probabilities only fall as a prefix grows, and a larger
    `nbest` only adds hypotheses that score no better. With a length penalty a longer prefix can
    always win, so a sentence is done once it has `beam` finished hypotheses (as in fairseq and
    Hugging Face): a rule that does not look at `nbest`, so the best hypothesis is the same whatever
    `nbest` is."""
    if best_live == NEG_INF:  # nothing left to extend
        return True
    if length_penalty:
        return len(finished) >= beam
    if len(finished) < nbest:
        return False
    return sorted((h.score for h in finished), reverse=True)[nbest - 1] >= best_live


class Beams:
    """Beam search's bookkeeping for a batch: `beam` live prefixes (decoder rows) per sentence still
    in the batch, their log-probabilities, and every sentence's finished hypotheses."""

    def __init__(self, batch: int, beam: int, bos: int, device: torch.device) -> None:
        self.beam = beam
        # Live prefixes per sentence: one at the start (k identical ones would be copies), then k.
        self.rows = 1
        self.alive = list(range(batch))  # original sentence index per block of `rows` rows
        self.prefixes = torch.full((batch, 1), bos, dtype=torch.long, device=device)
        self.scores = torch.zeros((batch, 1), device=device)  # log-probabilities, (B, rows)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
        self.closed: set[int] = set()  # sentences done but still in the batch as padding

    def last_tokens(self) -> torch.Tensor:
        return self.prefixes[:, -1]

    def best_live(self) -> list[float]:
        """The log-probability of the best live prefix of each sentence in the batch (one read of
        the tensor, not one per sentence: this runs at every step)."""
        return self.scores[:, 0].tolist()

    def finish(
        self,
        cand_scores: torch.Tensor,
        cand_beam: torch.Tensor,
        cand_token: torch.Tensor,
        is_eos: torch.Tensor,
        length_penalty: float,
        cut: list[bool],
        last: list[bool],
        given: int = 0,
        rules: SearchRules = SearchRules.CTRANSLATE2,
    ) -> None:
        """Moves the EOS candidates ranked within the top `beam` of their sentence to `finished`
        (not those of sentences already done, which only pad the batch). `cut[row]`: that sentence's
        budget is one token, so its EOS is the cut (see `_only_eos`); `given`, `rules`: see `Hypothesis`.

        `last[row]`: this step gives that sentence's last token within its budget, so each of its top
        `beam` candidates ends here, an EOS one as finished, any other as a line cut after this
        token, scored by its tokens alone; none continues. That is CTranslate2's last step: the
        k-best prefixes that reach the budget compete with the finished ones, not the best k that
        do not end there (which would add lines from below the top k, or none once k had finished)."""
        ends = is_eos[:, : self.beam].clone()
        ends[torch.tensor(last, device=ends.device)] = True
        for row, rank in ends.nonzero().tolist():
            if self.alive[row] in self.closed:
                continue
            log_prob = float(cand_scores[row, rank])
            if log_prob == NEG_INF:
                continue
            tokens = self.prefixes[row * self.rows + int(cand_beam[row, rank]), 1:].tolist()
            if not is_eos[row, rank]:
                tokens.append(int(cand_token[row, rank]))
            cut_here = cut[row] or not bool(is_eos[row, rank])
            hypothesis = Hypothesis.scored(tokens, log_prob, length_penalty, cut_here, given, rules)
            self.finished[self.alive[row]].append(hypothesis)

    def extend(
        self, cand_scores: torch.Tensor, cand_beam: torch.Tensor, cand_token: torch.Tensor, is_eos: torch.Tensor
    ) -> torch.Tensor:
        """The first `beam` candidates in rank order that do not end here continue (`beam` rows per
        sentence from now on): the best ones, and a dead candidate keeps its place among them, as in
        CTranslate2 (see `end_after_prefix_from_the_best_only`). Returns each new row's parent row
        among the previous step's rows."""
        live_rank = is_eos.to(torch.uint8).argsort(dim=-1, stable=True)[:, : self.beam]  # (B, k): non-EOS first
        live_scores = cand_scores.gather(1, live_rank).masked_fill(is_eos.gather(1, live_rank), NEG_INF)
        parent = (
            cand_beam.gather(1, live_rank) + torch.arange(len(self.alive), device=cand_beam.device)[:, None] * self.rows
        )
        self.prefixes = torch.cat([self.prefixes[parent.view(-1)], cand_token.gather(1, live_rank).view(-1, 1)], dim=1)
        self.scores, self.rows = live_scores, self.beam
        return parent.view(-1)

    def keep(self, sentences: torch.Tensor, rows: torch.Tensor) -> None:
        """Keeps the batch's sentences `sentences`, whose decoder rows are `rows`."""
        self.alive = [self.alive[r] for r in sentences.tolist()]
        self.prefixes, self.scores = self.prefixes[rows], self.scores[sentences]

    def results(self, nbest: int) -> list[list[Hypothesis]]:
        """Each sentence's `nbest` best finished hypotheses, best first."""
        return [
            sorted(f, key=lambda h: h.score, reverse=True)[:nbest] or [Hypothesis([], NEG_INF, NEG_INF)]
            for f in self.finished
        ]
