"""Validation: loss and perplexity under teacher forcing, and BLEU/chrF/exact match of greedy translations."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import torch

from seq2seq.data.batching import collate, make_batches
from seq2seq.data.pipeline import PreparedData, Split
from seq2seq.data.tokenizer import decoder_start_id
from seq2seq.inference.corpus_scores import corpus_bleu, corpus_chrf
from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.target_language import ModelLanguages
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
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return {
        "bleu": corpus_bleu(hypotheses, references).score,
        "chrf": corpus_chrf(hypotheses, references).score,
        "accuracy": 100.0 * exact / max(len(references), 1),
    }


def validation_translator(model: torch.nn.Module, data: PreparedData, device: torch.device) -> Translator:
    """The greedy translator of validation. A multilingual run's translates its first direction until
    `validation_translations` asks for each (the time estimate and the attention images use it so)."""
    languages = ModelLanguages(data.languages)
    first = data.languages.directions[0].split("-") if data.languages else (None, None)
    settings = DecodingSettings(beam=1, batch_size=64, src_lang=first[0], tgt_lang=first[1])
    return Translator(model, data.tokenizers, device, settings, languages)


def describe_directions(metrics: dict[str, float]) -> str:
    """Each direction's BLEU and chrF for the validation's log line ("" for one direction)."""
    names = [key.removeprefix("bleu/") for key in metrics if key.startswith("bleu/")]
    if not names:
        return ""
    each = ", ".join(f"{n} {metrics[f'bleu/{n}']:.2f}/{metrics[f'chrf/{n}']:.2f}" for n in names)
    return f" (the mean of BLEU/chrF {each})"


def validation_translations(
    translator: Translator, split: Split, max_sentences: int | None
) -> dict[str, tuple[list[str], list[str], list[str]]]:
    """(sources, hypotheses, references) of the first `max_sentences` validation pairs of each direction,
    by direction ("en-de"), each translated with its target language's tag; a one-direction split's under
    "" (its first `max_sentences` pairs, untagged)."""
    rows = split.direction_rows() or {"": np.arange(len(split.src_text))}
    results = {}
    for name, indices in rows.items():
        chosen = indices[:max_sentences] if max_sentences else indices
        sources = [split.src_text[i] for i in chosen]
        references = [split.tgt_text[i] for i in chosen]
        direction = translator.with_languages(*name.split("-")) if name else translator
        results[name] = (sources, direction.translate(sources), references)
    return results


def score_directions(results: dict[str, tuple[list[str], list[str], list[str]]]) -> dict[str, float]:
    """BLEU, chrF and exact match of each direction ("bleu/en-de", ...) and, as "bleu", "chrf" and
    "accuracy", their mean over the directions: what best_metric, target and patience follow, so no
    direction counts more for having more validation pairs. One direction: its scores alone."""
    if list(results) == [""]:
        _, hypotheses, references = results[""]
        return score_translations(hypotheses, references)
    metrics: dict[str, float] = {}
    for name, (_, hypotheses, references) in results.items():
        metrics.update({f"{key}/{name}": value for key, value in score_translations(hypotheses, references).items()})
    for key in ("bleu", "chrf", "accuracy"):
        metrics[key] = float(np.mean([metrics[f"{key}/{name}"] for name in results]))
    return metrics


def translated_sentences(split: Split, max_sentences: int | None) -> int:
    """How many sentences a validation translates (`validation_translations`)."""
    sizes = [len(rows) for rows in split.direction_rows().values()] or [len(split)]
    return sum(min(size, max_sentences) if max_sentences else size for size in sizes)
