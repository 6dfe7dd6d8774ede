"""Each line's training target among the teacher's n-best, and the lines dropped as badly translated.

select=chrf or select=bleu keeps, per line, the hypothesis with the highest sentence score against the
line's reference (sacreBLEU's sentence chrF, or sentence BLEU with its `sentence_bleu` settings:
exponential smoothing, effective order), the first of equal ones (the teacher's ranking breaks ties),
as Bergamot's pipeline picks from its n-best lists. select=none keeps the teacher's best.

The rule that drops a line: min_score > 0 and the kept hypothesis scores below it against the reference
(by select's metric; chrF under select=none), or the kept hypothesis is empty (nothing to learn from).
"""

from __future__ import annotations

from dataclasses import dataclass

import sacrebleu

FALLBACK_METRIC = "chrf"  # what min_score is measured by under select=none


@dataclass(frozen=True)
class Selected:
    sources: list[str]
    targets: list[str]
    dropped_empty: int
    dropped_low_score: int


def sentence_metric(name: str) -> sacrebleu.metrics.base.Metric:
    if name == "bleu":
        return sacrebleu.BLEU(effective_order=True)  # as sacrebleu.sentence_bleu scores one sentence
    return sacrebleu.CHRF()


def select(sources: list[str], nbests: list[list[str]], references: list[str], how: str, min_score: float) -> Selected:
    """The pairs the student trains on: each source with its chosen hypothesis, minus the dropped."""
    metric = sentence_metric(FALLBACK_METRIC if how == "none" else how)
    kept_sources, kept_targets, empty, low = [], [], 0, 0
    for source, hypotheses, reference in zip(sources, nbests, references, strict=True):
        if how == "none":
            best, score = hypotheses[0], None
        else:
            scores = [metric.sentence_score(h, [reference]).score for h in hypotheses]
            index = max(range(len(hypotheses)), key=scores.__getitem__)  # the first of equal scores
            best, score = hypotheses[index], scores[index]
        if not best.strip():
            empty += 1
            continue
        if min_score > 0:
            score = metric.sentence_score(best, [reference]).score if score is None else score
            if score < min_score:
                low += 1
                continue
        kept_sources.append(source)
        kept_targets.append(best)
    return Selected(kept_sources, kept_targets, empty, low)
