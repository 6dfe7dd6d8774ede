"""Corpus BLEU and chrF of translations against one reference a line, by sacreBLEU: the one place
seq2seq-translate's reference=, training's validation and seq2seq-distill's report compute them, so
the three cannot score the same lines differently."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CorpusScore:
    score: float
    report: str  # sacreBLEU's line with its signature, e.g. "BLEU = 35.20 66.1/... (nrefs:1|case:mixed|...)"


def corpus_bleu(
    hypotheses: list[str], references: list[str], *, lowercase: bool = False, pretokenized: bool = False
) -> CorpusScore:
    """sacreBLEU's corpus BLEU (13a tokenization, cased, unless told otherwise); `pretokenized`: the
    lines are tokenized already (e.g. by Moses), so sacreBLEU splits them on spaces alone."""
    import sacrebleu  # at the first score, not at start-up

    options: dict[str, Any] = {"tokenize": "none", "force": True} if pretokenized else {}
    return _score(sacrebleu.BLEU(lowercase=lowercase, **options), hypotheses, references)


def corpus_chrf(hypotheses: list[str], references: list[str]) -> CorpusScore:
    """sacreBLEU's corpus chrF with its defaults."""
    import sacrebleu

    return _score(sacrebleu.CHRF(), hypotheses, references)


def _score(metric: Any, hypotheses: list[str], references: list[str]) -> CorpusScore:
    result = metric.corpus_score(hypotheses, [references])
    return CorpusScore(result.score, f"{result}  ({metric.get_signature()})")
