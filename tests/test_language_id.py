"""The off-target rate against py3langid called directly, on sentences whose language is known."""

from __future__ import annotations

import pytest

pytest.importorskip("py3langid")

from py3langid.langid import MODEL_FILE, LanguageIdentifier  # noqa: E402

from seq2seq.data.language_id import identifier, off_target_rate  # noqa: E402

GERMAN = ["Ein Mann fährt mit seinem Fahrrad die Straße entlang.", "Zwei Hunde spielen im Schnee."]
FRENCH = ["Un homme fait du vélo dans la rue.", "Deux chiens jouent dans la neige."]
ENGLISH = ["A man rides his bicycle down the street.", "Two dogs are playing in the snow."]


def test_the_rate_is_the_share_of_lines_not_in_the_target() -> None:
    lines = GERMAN + FRENCH + ENGLISH + [""]  # 2 of 7 in French: 5 off target (the empty line among them)
    assert off_target_rate(lines, "fr", ["en", "de", "fr"]) == pytest.approx(5 / 7)
    assert off_target_rate(FRENCH, "fr", ["en", "de", "fr"]) == 0.0


def test_it_agrees_with_py3langid_restricted_by_hand() -> None:
    direct = LanguageIdentifier.from_model_file(MODEL_FILE)
    direct.set_languages(["de", "fr", "en"])
    lines = GERMAN + FRENCH + ENGLISH + ["Le chien", "Der Hund", "ok"]
    expected = sum(direct.classify(line)[0] != "de" for line in lines) / len(lines)
    assert off_target_rate(lines, "de", ["en", "de", "fr"]) == pytest.approx(expected)


def test_only_the_models_languages_are_answered() -> None:
    # Unrestricted, py3langid may call a short Spanish-looking line anything; restricted it is one of these.
    found = identifier(["de", "fr"])
    assert found.classify("Dos perros juegan en la nieve.")[0] in {"de", "fr"}


def test_codes_it_does_not_know_give_no_rate() -> None:
    assert identifier(["src", "tgt"]) is None
    assert off_target_rate(["anything"], "tgt", ["src", "tgt"]) is None
    assert off_target_rate(GERMAN, "de", ["de", "xx"]) is None  # nothing to tell German apart from
