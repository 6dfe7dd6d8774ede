"""Validation: loss and perplexity under teacher forcing, and BLEU/chrF/exact match of greedy translations."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from seq2seq.data.batching import collate, make_batches
from seq2seq.data.pipeline import Split
from seq2seq.data.tokenizer import decoder_start_id
from seq2seq.inference.translator import Translator
from seq2seq.train.loss import TeacherForcedLoss


@torch.inference_mode()
def validation_loss(
    objective: TeacherForcedLoss,
    split: Split,
    batch_tokens: int,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager],
) -> dict[str, float]:
    objective.eval()
    loss_sum = nll_sum = tokens = 0.0
    max_positions = objective.model.cfg.max_positions
    for indices in make_batches(split.src.lengths(), split.tgt.lengths(), batch_tokens, rng=None):
        batch = collate(split, indices, max_positions, decoder_start_id(objective.model.cfg.decoder_start)).to(device)
        with autocast():
            loss, nll = objective(batch.src, batch.tgt_in, batch.tgt_out)
        loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.tgt_tokens
    return {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50.0))}


def score_translations(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU and chrF with sacreBLEU's defaults (13a tokenization, cased), and exact match in %."""
    import sacrebleu  # at the first validation, not at start-up

    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "accuracy": 100.0 * exact / max(len(references), 1),
    }


def validation_translations(
    translator: Translator, split: Split, max_sentences: int | None
) -> tuple[list[str], list[str], list[str]]:
    """(sources, hypotheses, references) for the first `max_sentences` validation pairs."""
    sources = split.src_text[:max_sentences] if max_sentences else split.src_text
    references = split.tgt_text[: len(sources)]
    hypotheses = translator.translate(sources)
    return sources, hypotheses, references
