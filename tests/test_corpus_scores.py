"""The three places that score translations (seq2seq-translate's reference=, validation, the distill
report) give sacreBLEU's own corpus BLEU and chrF, and all go through seq2seq.inference.corpus_scores."""

from __future__ import annotations

import sacrebleu

from seq2seq.distill import report
from seq2seq.inference import command, corpus_scores
from seq2seq.train import evaluate

HYPOTHESES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "eine Frau liest ein Buch"]
REFERENCES = ["Ein Mann fährt ein Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest eine Zeitung."]


def expected(**options) -> float:
    return sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], **options).score


def test_the_three_scorers_give_sacrebleus_corpus_bleu(tmp_path, capsys):
    reference_file = tmp_path / "ref.de"
    reference_file.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score

    translated = command._score(HYPOTHESES, str(reference_file))
    validated = evaluate.score_translations(HYPOTHESES, REFERENCES)
    reported = report.scores(HYPOTHESES, REFERENCES, "de")

    assert 0 < expected() < 100 and expected(lowercase=True) != expected()  # the lines tell the options apart
    assert translated["bleu"] == validated["bleu"] == expected()
    assert translated["chrf"] == validated["chrf"] == chrf
    assert reported["bleu"] == round(expected(), 2)
    assert reported["bleu_lowercase"] == round(expected(lowercase=True), 2)
    assert reported["chrf"] == round(chrf, 2)
    assert "nrefs:1|case:mixed" in capsys.readouterr().err  # seq2seq-translate shows sacreBLEU's signature


def test_the_three_scorers_use_the_one_helper(tmp_path, monkeypatch):
    metrics = []
    real = corpus_scores._score

    def counting(metric, hypotheses, references):
        metrics.append(type(metric).__name__)
        return real(metric, hypotheses, references)

    monkeypatch.setattr(corpus_scores, "_score", counting)
    reference_file = tmp_path / "ref.de"
    reference_file.write_text("\n".join(REFERENCES) + "\n", encoding="utf-8")
    command._score(HYPOTHESES, str(reference_file))
    assert metrics == ["BLEU", "CHRF"]
    evaluate.score_translations(HYPOTHESES, REFERENCES)
    assert metrics[2:] == ["BLEU", "CHRF"]
    report.scores(HYPOTHESES, REFERENCES, "de")
    assert metrics[4:7] == ["BLEU", "BLEU", "CHRF"]  # cased, lowercase, chrF (then Moses' where installed)


def test_pretokenized_splits_on_spaces_alone():
    tokens = ["a man , riding .", "two dogs"]
    references = ["a man , riding a bike .", "two dogs play"]
    want = sacrebleu.corpus_bleu(tokens, [references], tokenize="none", force=True).score
    assert corpus_scores.corpus_bleu(tokens, references, pretokenized=True).score == want
