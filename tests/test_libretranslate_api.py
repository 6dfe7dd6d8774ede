"""What LibreTranslate's own API tests check (its libretranslate/tests/test_api/: 14 tests), asked of
`seq2seq-serve` over HTTP: a real server on a port found at run time, a tiny model of the built-in task
trained here. Written from what those tests check, not from their code; their en -> es pair is the
model's src -> tgt, their "Hello" a line of the task's letters. Where they compare an error's text
whole, so do these: clients show LibreTranslate's texts to people, and some match on them."""

from __future__ import annotations

from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the server's tests need the dev extra: pip install -e '.[dev]'")
pytest.importorskip("uvicorn", reason="seq2seq-serve needs: pip install -e '.[serve]'")

from test_serve import Server, run_dir, started  # noqa: E402, F401  (run_dir: the tiny model's fixture)

SOURCE, TARGET = "src", "tgt"  # what the built-in task's model translates
TEXT = "a b c d"


@pytest.fixture(scope="module")
def server(run_dir: Path) -> Server:  # noqa: F811
    running = started(f"run={run_dir}")
    yield running
    assert running.stop() == 0


def url(server: Server, path: str) -> str:
    return server.url + path


def test_detect_answers_a_ranked_list_of_languages(server: Server) -> None:
    answer = httpx.post(url(server, "/detect"), data={"q": TEXT}, timeout=60)
    assert answer.status_code == 200
    ranked = answer.json()
    assert len(ranked) >= 1 and "confidence" in ranked[0] and "language" in ranked[0]


def test_detect_without_parameters_is_400_with_an_error(server: Server) -> None:
    answer = httpx.post(url(server, "/detect"), timeout=60)
    assert answer.status_code == 400 and "error" in answer.json()


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/detect"), ("POST", "/languages"), ("POST", "/health"), ("POST", "/spec")],
)
def test_a_method_the_route_does_not_take_is_405(server: Server, method: str, path: str) -> None:
    assert httpx.request(method, url(server, path), timeout=60).status_code == 405


@pytest.mark.parametrize("path", ["/frontend/settings", "/spec"])
def test_the_settings_and_the_spec_are_there(server: Server, path: str) -> None:
    assert httpx.get(url(server, path), timeout=60).status_code == 200


def test_languages_lists_codes_and_names(server: Server) -> None:
    answer = httpx.get(url(server, "/languages"), timeout=60)
    assert answer.status_code == 200
    languages = answer.json()
    assert len(languages) >= 1 and "code" in languages[0] and "name" in languages[0]


def test_health_is_exactly_status_ok(server: Server) -> None:
    answer = httpx.get(url(server, "/health"), timeout=60)
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}


def test_a_form_translation_answers_its_text(server: Server) -> None:
    form = {"q": TEXT, "source": SOURCE, "target": TARGET, "format": "text"}
    answer = httpx.post(url(server, "/translate"), data=form, timeout=60)
    assert answer.status_code == 200 and "translatedText" in answer.json()


def test_a_json_batch_answers_one_translation_per_text(server: Server) -> None:
    body = {"q": [TEXT, "e f g"], "source": SOURCE, "target": TARGET, "format": "text"}
    answer = httpx.post(url(server, "/translate"), json=body, timeout=60)
    assert answer.status_code == 200
    translated = answer.json()["translatedText"]
    assert isinstance(translated, list) and len(translated) == 2


def test_an_unsupported_language_is_named_in_libretranslates_words(server: Server) -> None:
    form = {"q": TEXT, "source": SOURCE, "target": "zz", "format": "text"}
    answer = httpx.post(url(server, "/translate"), data=form, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"] == "zz is not supported"


def test_a_missing_q_is_named_in_libretranslates_words(server: Server) -> None:
    form = {"source": SOURCE, "target": TARGET, "format": "text"}
    answer = httpx.post(url(server, "/translate"), data=form, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"] == "Invalid request: missing q parameter"


def test_alternatives_are_trimmed_distinct_and_never_the_translation(server: Server) -> None:
    """An alternative came back as the translation itself with a leading space (" C B A" beside
    "C B A"): a hypothesis that starts with a word-initial token detokenizes with a space before it."""
    texts = ["a b c d", "e f g", "h i j k l", "m n", "b a", "q r s t a b", "c c c", "t s r q p o n", "a\nb c"]
    body = {"q": texts, "source": SOURCE, "target": TARGET, "format": "text", "alternatives": 6}
    answer = httpx.post(url(server, "/translate"), json=body, timeout=60)
    assert answer.status_code == 200
    translations, alternatives = answer.json()["translatedText"], answer.json()["alternatives"]
    assert len(translations) == len(alternatives) == len(texts)
    assert sum(map(len, alternatives)) > 0  # the beam of 7 gave some, or nothing below is checked
    for translation, others in zip(translations, alternatives, strict=True):
        for other in others:
            assert other and all(line == line.strip() for line in other.split("\n")), (translation, others)
        assert len(set(others)) == len(others), others
        assert "\n".join(line.strip() for line in translation.split("\n")) not in others, (translation, others)
