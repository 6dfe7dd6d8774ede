"""scripts/back_translate.py: the reverse model's direction checked, its translations written as a
corpus, cached and resumed as seq2seq-distill's are, and the user's files left alone."""

from __future__ import annotations

import json

import pytest
from conftest import digit_sentence
from script_module import load_script

from seq2seq.config import UserError
from seq2seq.distill.teacher import Teacher


def test_a_model_of_another_direction_is_refused_in_one_line():
    script = load_script("back_translate")
    teacher = Teacher(["runs/x"], [], {"data": {"src_lang": "en", "tgt_lang": "de", "directions": None}})
    script.model_direction(Teacher(["runs/x"], [], {"data": {"src_lang": "de", "tgt_lang": "en"}}), "en", "de")
    with pytest.raises(UserError, match="--model runs/x: translates en-de, not de-en; .* needs a de-en model"):
        script.model_direction(teacher, "en", "de")
    multilingual = Teacher(["runs/m"], [], {"data": {"src_lang": "x", "tgt_lang": "y", "directions": ["en-de"]}})
    with pytest.raises(UserError, match="translates en-de, not fr-en"):
        script.model_direction(multilingual, "en", "fr")


def test_pairs_already_there_are_not_written_over(tmp_path):
    script = load_script("back_translate")
    (tmp_path / "train.en").write_text("mine\n")
    with pytest.raises(UserError, match="train.en: exists and was not written by this back-translation"):
        script.check_output(tmp_path, ["train.en", "train.de"], "key")


@pytest.mark.slow  # trains the session's multilingual run when no other test has
def test_monolingual_german_becomes_a_corpus_and_a_second_run_reads_the_cache(multilingual_run, tmp_path, monkeypatch):
    script = load_script("back_translate")
    mono = tmp_path / "mono.de"
    lines = [digit_sentence("de", 50_000 + i) for i in range(12)]
    mono.write_text("\n".join(lines) + "\n")
    argv = ["--model", str(multilingual_run.path), "--input", str(mono), "--src", "en", "--tgt", "de"]
    argv += ["--out", str(tmp_path / "bt"), "--cache", str(tmp_path / "cache"), "--chunk-lines", "5", "--beam", "2"]
    script.main(argv)
    sources = (tmp_path / "bt" / "train.en").read_text().splitlines()
    assert (tmp_path / "bt" / "train.de").read_text().splitlines() == lines  # the real text, as it was
    assert len(sources) == 12 and sum(s.startswith("en") for s in sources) >= 10  # English, from the de-en model
    progress = json.loads(next((tmp_path / "cache").glob("*/progress.json")).read_text())
    assert progress["lines"] == 12 and progress["finished"]
    calls = []
    monkeypatch.setattr(script, "engine_for", lambda *a: calls.append(a) or _NoTranslation())
    script.main(argv)  # the same model, lines and settings: from the cache, nothing translated
    assert (tmp_path / "bt" / "train.en").read_text().splitlines() == sources


class _NoTranslation:
    def with_languages(self, *languages: str) -> _NoTranslation:
        return self

    def translate_nbest(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a cached back-translation was translated again")
