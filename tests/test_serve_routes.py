"""The server's routes in process (Starlette's test client) over a stand-in engine that upper-cases
each line it is given, so that what reached the model is visible in the answer: parameters from the
query string, a form or JSON, CORS, JSON errors, sentences, HTML, files, bounds, the drain after SIGTERM.
The real model's answers are compared with seq2seq-translate in tests/test_serve.py."""

from __future__ import annotations

import copy
import dataclasses
import io
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="seq2seq-serve needs: pip install -e '.[serve]'")
from starlette.testclient import TestClient  # noqa: E402

from seq2seq.config import TranslateConfig  # noqa: E402
from seq2seq.inference.settings import DecodingSettings  # noqa: E402
from seq2seq.inference.target_language import ModelLanguages  # noqa: E402
from seq2seq.inference.translator_api import Translation  # noqa: E402
from seq2seq.serve.app import Served, ServerInfo, Web, create_app  # noqa: E402
from seq2seq.serve.batcher import Batcher  # noqa: E402
from seq2seq.serve.requests import Limits  # noqa: E402


class UpperEngines:
    """Stands in for Engines: a line's translation is the line upper-cased; n-best lists add
    numbered variants, the second equal to the first (as a beam's can be after detokenising)."""

    def __init__(self, seconds: float = 0.0, change: Callable[[str], str] = str.upper) -> None:
        self.change = change
        self.main = self  # the engine a request is tokenized with (translator_api.encode_sources)
        self.tokenizers, self.languages, self.max_positions = self, ModelLanguages(None), 1024
        self.tgt = self
        self.seconds = seconds
        self.decoded: list[str] = []  # every line the model was given
        self.cfg = TranslateConfig()

    def get_vocab_size(self) -> int:
        return 1000

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[1] * len(line.split()) for line in lines]

    def kind(self, settings: object) -> str:
        return "ctranslate2"

    def for_settings(self, settings: object) -> UpperEngines:
        return self

    def decoding_with(self, settings: DecodingSettings) -> UpperEngines:
        """A view decoding with `settings`, as the real engines give (the decoded lines shared)."""
        view = copy.copy(self)
        view.cfg = dataclasses.replace(self.cfg, **dataclasses.asdict(settings))
        return view

    def has_torch_weights(self) -> bool:
        return False

    def translate_nbest(self, lines: list[str], prefixes: object, sources: object = None) -> list[list[Translation]]:
        self.decoded += lines
        time.sleep(self.seconds)
        variants = ["", "", *(f" #{i}" for i in range(2, self.cfg.nbest))][: self.cfg.nbest]
        return [[Translation(self.change(line) + v, 0.0, []) for v in variants] if line.strip() else
                [Translation("", 0.0, [])] for line in lines]  # fmt: skip


def served_model(source: str, target: str, seconds: float = 0.0, change: Callable[[str], str] = str.upper):
    engines = UpperEngines(seconds, change)
    settings = DecodingSettings(beam=2)
    batcher = Batcher(lambda: engines, settings, max_batch_tokens=4096, max_wait_ms=1)
    batcher.start()
    return Served(batcher, settings, ServerInfo(f"{source}-{target}", "CTranslate2", source, target)), engines


def app_of(tmp_path: Path, *, seconds: float = 0.0, source: str = "en", target: str = "de", **web: object):
    model, engines = served_model(source, target, seconds)
    app = create_app([model], Limits(16, 40, 8), None, None, Web(files_dir=tmp_path, **web))
    return app, model.batcher, engines


@pytest.fixture
def served(tmp_path: Path):
    app, batcher, engines = app_of(tmp_path)
    with TestClient(app) as client:
        yield client, engines
    batcher.stop()


JSON = {"content-type": "application/json"}


def test_parameters_come_from_the_query_string_a_form_or_json_alike(served) -> None:
    """LibreTranslate reads request.values (query and form) or JSON; one widely used client posts
    everything in the query string with an empty body. Keys it has no use for (its page's `secret`)
    are ignored; a form's CRLF is LF, as LibreTranslate makes it."""
    client, engines = served
    query = client.post("/translate?q=ab%20cd&source=en&target=de&secret=s3")
    form = client.post("/translate", data={"q": "ab cd\r\nef", "source": "en", "target": "de", "secret": "s3"})
    json_body = client.post("/translate", json={"q": "ab cd", "source": "en", "target": "de", "secret": "s3"})
    both = client.post("/translate?target=de&source=en", json={"q": "ab cd"})  # query and body together
    assert [a.status_code for a in (query, form, json_body, both)] == [200] * 4
    assert query.json() == json_body.json() == both.json() == {"translatedText": "AB CD"}
    assert form.json() == {"translatedText": "AB CD\nEF"}
    assert "\r" not in "".join(engines.decoded) and engines.decoded.count("ab cd") == 4
    # /v1/translate, this server's own API, still refuses a key it does not know (a misspelled option).
    assert client.post("/v1/translate", json={"q": "a", "beems": 3}).status_code == 400


def test_every_error_is_json_and_cors_preflights_are_answered(served) -> None:
    client, _ = served
    missing = client.get("/no/such/route")
    assert missing.status_code == 404 and missing.json() == {"error": "no route /no/such/route (see GET /spec)"}
    wrong = client.get("/translate")
    assert wrong.status_code == 405 and wrong.json()["error"] == "GET is not allowed on /translate: use POST"
    preflight = client.options("/translate", headers={"Origin": "https://example.org",
                                                      "Access-Control-Request-Method": "POST",
                                                      "Access-Control-Request-Headers": "content-type"})  # fmt: skip
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "content-type" in preflight.headers["access-control-allow-headers"].lower()
    answer = client.post("/translate", json={"q": "ab"}, headers={"Origin": "https://example.org"})
    assert answer.headers["access-control-allow-origin"] == "*"


def test_cors_origins_limit_which_pages_may_call(tmp_path: Path) -> None:
    app, batcher, _ = app_of(tmp_path, cors_origins=("https://good.example",))
    try:
        with TestClient(app) as client:

            def origin_allowed(origin: str) -> str | None:
                headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
                return client.options("/translate", headers=headers).headers.get("access-control-allow-origin")

            assert origin_allowed("https://good.example") == "https://good.example"
            assert origin_allowed("https://evil.example") is None
    finally:
        batcher.stop()


def test_duplicate_alternatives_are_removed(served) -> None:
    """The stand-in's second hypothesis equals its first: LibreTranslate drops it (and repeats, and
    empty ones), so 3 alternatives asked give 2."""
    client, _ = served
    answer = client.post("/translate", json={"q": ["ab", "cd"], "source": "en", "target": "de", "alternatives": 3})
    assert answer.json() == {"translatedText": ["AB", "CD"], "alternatives": [["AB #2", "AB #3"], ["CD #2", "CD #3"]]}


HOSTILE = [  # (raw body, path, status, what the error names): each was a 500 before
    (b'{"q": "\\ud800"}', "/translate", 400, "'q' holds a lone surrogate (U+D800)"),
    (b'{"q": "ab", "api_key": "\\udfff"}', "/translate", 400, "'api_key' holds a lone surrogate"),
    (b'{"q": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "/translate", 400, "nested too deeply"),
    (b'{"q": "ab", "beam": NaN}', "/v1/translate", 400, "beam=nan: must be a finite number"),
    (b'{"q": "ab", "beam": 1e999}', "/v1/translate", 400, "beam=inf: must be a finite number"),
    (b'{"q": "ab", "length_penalty": NaN}', "/v1/translate", 400, "length_penalty=nan: must be a finite"),
    (b'{"q": "ab", "sampling": true, "seed": 1e30}', "/v1/translate", 400, "seed=1000000000000000019884624838656"),
    (b'{"q": "ab", "sampling": true, "temperature": 1e999}', "/v1/translate", 400, "temperature=inf"),
    (b'{"q": "ab", "alternatives": 100000}', "/translate", 400, "alternatives parameter must be <= 7; alter"),
    (b'{"q": "ab", "source": ["en"]}', "/translate", 400, "source parameter must be a language code, not list"),
    (b'{"q": "ab", "beam": 100}', "/v1/translate", 400, "beam=100: must be at most max_beam=8"),
    (b'{"q": "ab", "sampling": true, "nbest": 100}', "/v1/translate", 400, "nbest=100: must be at most"),
]


@pytest.mark.parametrize(("raw", "path", "status", "error"), HOSTILE, ids=[e for *_, e in HOSTILE])
def test_hostile_values_are_400_naming_the_key(served, raw: bytes, path: str, status: int, error: str) -> None:
    client, engines = served
    answer = client.post(path, content=raw, headers=JSON)
    assert answer.status_code == status and error in answer.json()["error"], answer.text
    assert engines.decoded == [], "nothing of a refused request reaches the model"


@pytest.mark.parametrize("seed", [2**32, 2**63, 2**64])
def test_a_request_seed_is_bounded_as_every_way_in_bounds_it(served, seed: int) -> None:
    """The server held seeds to [0, 2^63 - 1] while seq2seq-translate, the Python API and training
    hold them to what numpy and CTranslate2 take: one bound, one message, wherever a seed comes in."""
    from seq2seq.config import UserError, validate_translate

    client, engines = served
    with pytest.raises(UserError) as refused:
        validate_translate(TranslateConfig(run="r", sampling=True, seed=seed))  # seq2seq-translate's check
    answer = client.post("/v1/translate", json={"q": "ab", "sampling": True, "seed": seed})
    assert answer.status_code == 400 and answer.json()["error"] == str(refused.value), answer.text
    assert (
        str(refused.value)
        == f"config error: seed={seed}: must be in [0, {2**32 - 1}] (what numpy and CTranslate2 take)"
    )
    assert engines.decoded == []


def test_a_form_number_in_other_digits_is_400(served) -> None:
    client, _ = served
    answer = client.post("/translate", data={"q": "ab", "alternatives": "²"})  # '²'.isdigit() is True
    assert answer.status_code == 400 and answer.json()["error"] == (
        "Invalid request: alternatives parameter is not a number; alternatives='²': must be an integer >= 0"
    )


def test_the_line_limit_is_per_line(served) -> None:
    """max_line_chars=40 here: three lines of 30 characters in one string pass; one line of 41 fails."""
    client, _ = served
    three = "\n".join(["ab " * 10] * 3)
    assert client.post("/translate", json={"q": three}).status_code == 200
    long = client.post("/translate", json={"q": "ab\n" + "x" * 41})
    assert long.status_code == 413 and long.json()["error"] == (
        "Invalid request: request (41) exceeds text limit (40); q line 2 has 41 characters, more than max_line_chars=40"
    )


def test_sentences_are_split_before_decoding_and_joined_after(served) -> None:
    client, engines = served
    answer = client.post("/translate", json={"q": "Ab cd.  Ef gh! Ij kl?\nMn op."})
    assert engines.decoded == ["Ab cd.", "Ef gh!", "Ij kl?", "Mn op."]
    assert answer.json()["translatedText"] == "AB CD.  EF GH! IJ KL?\nMN OP."


def test_html_keeps_tags_and_attributes_and_translates_text(served) -> None:
    client, engines = served
    html = ('<div class="x" title="ab cd"><p>Ab cd. <b>Ef</b> gh &amp; ij</p><!-- ab -->'
            '<script>var ab = 1;</script><code>ab</code><p translate="no">ab</p><img src="a.png" alt="ab"><br></div>')  # fmt: skip
    answer = client.post("/translate", json={"q": html, "format": "html"})
    expected = ('<div class="x" title="ab cd"><p>AB CD. <b>EF</b> GH &amp; IJ</p><!-- ab -->'
                '<script>var ab = 1;</script><code>ab</code><p translate="no">ab</p><img src="a.png" alt="ab"><br></div>')  # fmt: skip
    assert answer.status_code == 200 and answer.json()["translatedText"] == expected
    assert engines.decoded == ["Ab cd.", "Ef", "gh & ij"]


HTML_KEPT = [  # (document, what comes back): what is not translated comes back byte for byte
    # An unclosed script kept its tag and lost its text; CDATA lost its markers and was translated.
    ("<p>A man.</p><script>alert(1)", "<p>A MAN.</p><script>alert(1)"),
    ("<![CDATA[A man.]]><p>x</p>", "<![CDATA[A man.]]><p>X</p>"),
    ("<p>ab</p><style>p > a { content: '&amp;' }", "<p>AB</p><style>p > a { content: '&amp;' }"),
    # Entities in code were rewritten (&nbsp; a raw character, &#60; as &lt;, &quot; as ").
    ("<code>a &lt; b&nbsp;c &#60; &quot;d&quot;</code> ef", "<code>a &lt; b&nbsp;c &#60; &quot;d&quot;</code> EF"),
    ('<script type="x">if (a < b && c) f("</p>")</script>', '<script type="x">if (a < b && c) f("</p>")</script>'),
    # LibreTranslate's other untranslated elements; attributes as written, upper case and all.
    (
        "<TIME>ab</TIME> <address>cd</address> <P CLASS=x>ef</P>",
        "<TIME>ab</TIME> <address>cd</address> <P CLASS=x>EF</P>",
    ),
    # <pre> is translated, as LibreTranslate does, line by line with its indentation kept.
    ("<pre>  ab cd\n    ef\n</pre>", "<pre>  AB CD\n    EF\n</pre>"),
    ("<td>&nbsp;</td><p>a&amp;b <!-- c --> d</p>", "<td>&nbsp;</td><p>A&amp;B <!-- c --> D</p>"),
]


@pytest.mark.parametrize(("document", "expected"), HTML_KEPT, ids=[d for d, _ in HTML_KEPT])
def test_html_left_alone_is_kept_byte_for_byte(served, document: str, expected: str) -> None:
    client, _ = served
    answer = client.post("/translate", json={"q": document, "format": "html"})
    assert answer.status_code == 200 and answer.json()["translatedText"] == expected


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.text(alphabet="<>/!-[]?=\"'abpcodeCDATAscriptyl \n", max_size=40))
def test_html_texts_are_replaced_where_they_stand_and_nothing_else(document: str) -> None:
    """Any markup, broken too: each text given back as it was read leaves the document as it was. With
    no entities in the alphabet, a text is its source but for `<` and `>` escaped and, outside <pre>,
    its runs of whitespace read as one space."""
    import html
    import re

    from seq2seq.serve.html_text import HtmlDocument

    parsed = HtmlDocument(document)

    def spaced(text: str) -> str:
        return re.sub(r"\s+", " ", text)

    assert spaced(html.unescape(parsed.render(parsed.texts))) == spaced(document)


@pytest.mark.parametrize(
    ("document", "texts", "rendered"),
    [
        ("<![<", ["<![<"], "&lt;![&lt;"),  # unclosed: text, escaped as text is
        ("a<![<b>c", ["a", "c"], "a<![<b>c"),
        ("<p>hi<![ >there</p>", ["hi", "there"], "<p>hi<![ >there</p>"),
        ("x\ny<![ \n>z", ["x y", "z"], "x y<![ \n>z"),  # the position put back across a line break
    ],
)
def test_a_marked_section_without_a_name_is_a_bogus_comment(document: str, texts: list[str], rendered: str) -> None:
    """`<![` and no name: Python 3.11's html.parser raised AssertionError (hypothesis found "<![<"); read
    as a browser reads it, a comment to the next `>`, kept as written, the texts around it in place."""
    from seq2seq.serve.html_text import HtmlDocument

    parsed = HtmlDocument(document)
    assert parsed.texts == texts
    assert parsed.render(texts) == rendered


def test_detect_is_restricted_to_the_servers_languages(tmp_path: Path) -> None:
    app, batcher, _ = app_of(tmp_path, source="en", target="fr")
    try:
        with TestClient(app) as client:
            german = client.post("/detect", json={"q": "Ein Mann fährt durch die Stadt."}).json()
            french = client.post("/detect", data={"q": "Un homme fait du vélo en ville."}).json()
    finally:
        batcher.stop()
    assert {c["language"] for c in german} <= {"en", "fr"}, "never a language the server does not have"
    assert french[0]["language"] == "fr" and french[0]["confidence"] > 90
    assert [c["confidence"] for c in french] == sorted((c["confidence"] for c in french), reverse=True)


def test_languages_and_frontend_settings_name_the_languages(served) -> None:
    client, _ = served
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    settings = client.get("/frontend/settings").json()
    assert settings["language"] == {"source": {"code": "en", "name": "English"},
                                    "target": {"code": "de", "name": "German"}}  # fmt: skip
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".srt", ".docx"] and settings["charLimit"] == 40
    paths = client.get("/spec").json()["paths"]
    assert {"/translate", "/detect", "/languages", "/translate_file", "/frontend/settings"} <= set(paths)


def test_the_page_names_its_server_and_loads_nothing_from_elsewhere(served) -> None:
    """GET /: the models, engines and the limits /frontend/settings lacks, written into the page; every
    resource it loads is its own (it works offline); the routes it calls are this server's."""
    import html.parser
    import json
    import re

    client, _ = served
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    embedded = re.search(r'<script id="server" type="application/json">(.*?)</script>', page.text).group(1)
    assert json.loads(embedded) == {"models": [{"model": "en-de", "engine": "CTranslate2"}], "max_request_lines": 16,
                                    "max_beam": 8, "max_file_bytes": 5_000_000}  # fmt: skip

    class Resources(html.parser.HTMLParser):
        found: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.found += [value or "" for name, value in attrs if name in ("src", "href")]

    parser = Resources()
    parser.feed(page.text)
    assert parser.found == ["data:,", "/spec"]  # the (empty) icon and the API link: nothing elsewhere
    assert not re.search(r"https?://|@import|url\(", page.text)
    called = set(re.findall(r'"(/[a-z_/1]+)"', page.text))
    assert called == {"/spec", "/frontend/settings", "/languages", "/translate", "/v1/attention", "/translate_file"}
    assert called - {"/spec"} <= set(client.get("/spec").json()["paths"])


def _translated_file(client: TestClient, name: str, data: bytes) -> bytes:
    answer = client.post("/translate_file", files={"file": (name, data)}, data={"source": "en", "target": "de"})
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/") and url.endswith("." + name)
    download = client.get(url)
    assert download.status_code == 200
    assert download.headers["content-disposition"] == f'attachment; filename="{name}"'
    return download.content


def test_an_app_removes_the_files_folder_it_made_and_never_a_given_one(tmp_path: Path, monkeypatch) -> None:
    """Without Web.files_dir the app makes a temporary folder for translated files, and it is the app's:
    gone when the app stops serving, or with an app dropped unserved. A folder the caller gave is
    written into and stays, with what the caller had put there."""
    import gc
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes it, to be seen

    def made() -> list[Path]:
        return sorted(tmp_path.glob("seq2seq-serve-files-*"))

    model, _ = served_model("en", "de")
    try:
        with TestClient(create_app([model], Limits(16, 40, 8), None)) as client:
            assert _translated_file(client, "notes.txt", b"ab\n") == b"AB\n"
            (folder,) = made()
            assert any(folder.iterdir())  # the translated file, for its download
        assert made() == []
        unserved = create_app([model], Limits(16, 40, 8), None)
        assert len(made()) == 1
        del unserved
        gc.collect()
        assert made() == []
        given = tmp_path / "given"
        given.mkdir()
        (given / "notes.txt").write_text("mine")
        with TestClient(create_app([model], Limits(16, 40, 8), None, None, Web(files_dir=given))) as client:
            assert _translated_file(client, "more.txt", b"cd\n") == b"CD\n"
        assert (given / "notes.txt").read_text() == "mine" and len(list(given.iterdir())) == 2
    finally:
        model.batcher.stop()


def test_text_html_and_subtitle_files_come_back_in_their_format(served) -> None:
    client, _ = served
    assert _translated_file(client, "notes.txt", b"ab cd\r\n\r\nEf gh. Ij kl.\n") == b"AB CD\r\n\r\nEF GH. IJ KL.\n"
    page = b"<html><body><h1 id=t>ab</h1><p>cd <i>ef</i></p></body></html>"
    assert (
        _translated_file(client, "page.html", page)
        == b"<html><body><h1 id=t>AB</h1><p>CD <i>EF</i></p></body></html>"  # the markup as written
    )
    import srt

    subtitles = b"1\n00:00:01,000 --> 00:00:02,500\nab cd\nef\n\n2\n00:00:03,000 --> 00:00:04,000\ngh\n\n"
    back = list(srt.parse(_translated_file(client, "film.srt", subtitles).decode()))
    assert [(s.index, s.start.total_seconds(), s.end.total_seconds(), s.content) for s in back] == [
        (1, 1.0, 2.5, "AB CD\nEF"), (2, 3.0, 4.0, "GH")]  # fmt: skip


def test_a_translation_with_a_line_break_keeps_a_text_file_line_for_line(tmp_path: Path) -> None:
    """A model can write any byte, "\n" and "\x85" included: a .txt file still gets one line per line."""
    model, _ = served_model("en", "de", change=lambda line: line.replace(" ", "\n").replace("f", "\x85"))
    app = create_app([model], Limits(16, 40, 8), None, None, Web(files_dir=tmp_path))
    with TestClient(app) as client:
        assert _translated_file(client, "notes.txt", b"ab cd\r\nef\n") == b"ab cd\r\ne \n"


def test_a_word_file_comes_back_as_word_with_its_tables(served) -> None:
    docx = pytest.importorskip("docx")
    client, _ = served
    document = docx.Document()
    document.add_heading("ab cd", level=1)
    paragraph = document.add_paragraph("ef ")
    paragraph.add_run("gh").bold = True
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "ij", "kl"
    data = io.BytesIO()
    document.save(data)
    back = docx.Document(io.BytesIO(_translated_file(client, "report.docx", data.getvalue())))
    assert [p.text for p in back.paragraphs] == ["AB CD", "EF GH"]
    assert back.paragraphs[0].style.name == "Heading 1"
    assert [cell.text for cell in back.tables[0].rows[0].cells] == ["IJ", "KL"]


def test_files_that_cannot_be_translated_are_refused_in_one_line(served) -> None:
    client, _ = served
    cases = [
        (("x.pdf", b"%PDF"), 400, "Invalid request: file format not supported; file 'x.pdf': the format .pdf is"),
        (("x.txt", b""), 400, "Invalid request: empty file ('x.txt')"),
        (("x.txt", b"\xff\xfe\x00"), 400, "not UTF-8 text"),
        (("x.docx", b"not a zip"), 400, "not a Word (.docx) document"),
        (("x.txt", b"x" * 41), 413, "more than max_line_chars=40"),
    ]
    for upload, status, error in cases:
        answer = client.post("/translate_file", files={"file": upload})
        assert answer.status_code == status and error in answer.json()["error"], answer.text
    unknown = client.get("/download_file/..%2F..%2Fetc%2Fpasswd")
    assert unknown.status_code == 404 and "error" in unknown.json()


def test_after_sigterm_a_request_still_waiting_gets_503_json_within_the_drain_time(tmp_path: Path) -> None:
    """SIGTERM starts the drain time (Batcher.drain); a request whose lines are still being decoded
    when it ends is answered 503 with JSON, not cancelled, and stopping does not wait for the batch."""
    app, batcher, _ = app_of(tmp_path, seconds=3.0)  # each batch takes 3 s
    with TestClient(app) as client:
        answers = []
        request = threading.Thread(target=lambda: answers.append(client.post("/translate", json={"q": "ab"})))
        request.start()
        time.sleep(0.3)  # its batch is being decoded
        start = time.monotonic()
        batcher.drain(0.5)
        request.join()
        answered = time.monotonic() - start
        batcher.stop(timeout=0.5)
        stopped = time.monotonic() - start
    assert answers[0].status_code == 503
    assert answers[0].json() == {"error": "the server is shutting down: this request was not translated in time"}
    assert answered < 1.5 and stopped < 2.5, (answered, stopped)


def test_sigterm_starts_the_drain_time() -> None:
    """The server's first SIGTERM (or Ctrl-C) starts the batcher's drain time as uvicorn begins to stop."""
    import signal

    import uvicorn

    from seq2seq.serve.command import _Server

    server = _Server(uvicorn.Config(app=None))
    calls: list[str] = []
    server.on_exit = lambda: calls.append("drain")
    server.handle_exit(signal.SIGTERM, None)
    assert calls == ["drain"] and server.should_exit


def test_several_models_each_pair_and_a_pivot_through_a_common_language(tmp_path: Path, caplog) -> None:
    """en -> de upper-cases, de -> fr reverses: en -> fr goes through de (upper-cased, then reversed);
    /languages lists every pair, pivots too; each model has its own batcher."""
    english_german, _ = served_model("en", "de")
    german_french, _ = served_model("de", "fr", change=lambda line: line[::-1])
    with caplog.at_level(logging.INFO, logger="seq2seq.serve"):
        app = create_app([english_german, german_french], Limits(16, 40, 8), None, None, Web(files_dir=tmp_path))
    try:
        with TestClient(app) as client:
            direct = client.post("/translate", json={"q": "ab cd", "source": "en", "target": "de"}).json()
            second = client.post("/translate", json={"q": "AB cd", "source": "de", "target": "fr"}).json()
            pivot = client.post("/translate", json={"q": ["ab cd", "Ef gh. Ij kl."], "source": "en", "target": "fr"})
            listing = client.get("/languages").json()
            no_target = client.post("/translate", json={"q": "ab"})
            backwards = client.post("/translate", json={"q": "ab", "source": "fr", "target": "en"})
            native = client.post("/v1/translate", json={"q": "ab", "source": "en", "target": "fr"})
            health = client.get("/health").json()
            info = client.get("/v1/info").json()
            page = client.get("/").text
    finally:
        english_german.batcher.stop()
        german_french.batcher.stop()
    assert '"models": [{"model": "en-de", "engine": "CTranslate2"}, {"model": "de-fr", ' in page  # its header
    assert direct == {"translatedText": "AB CD"} and second == {"translatedText": "dc BA"}
    assert pivot.json() == {"translatedText": ["DC BA", ".HG FE .LK JI"]}, "each sentence through de"
    assert "en -> fr: through de (en-de, then de-fr)" in caplog.text
    assert listing == [
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "de", "name": "German", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
    assert no_target.status_code == 400 and no_target.json()["error"] == (
        "Invalid request: missing target parameter; this server translates en -> de, de -> fr"
    )
    assert backwards.json() == {
        "error": "English (en) is not available as a target language from French (fr); "
        "this server translates en -> de, de -> fr"
    }
    assert native.status_code == 400 and "decodes with one model" in native.json()["error"]
    assert health == {"status": "ok"}, "LibreTranslate's exactly: the rest is /v1/info's"
    assert [m["source"] + m["target"] for m in info["models"]] == ["ende", "defr"]
    assert english_german.batcher is not german_french.batcher


def test_source_auto_picks_among_the_sources_for_the_target(tmp_path: Path) -> None:
    """Two models into English: `auto` detects which of their sources a text is in."""
    german, german_engines = served_model("de", "en")
    french, french_engines = served_model("fr", "en", change=lambda line: line[::-1])
    app = create_app([german, french], Limits(16, 60, 8), None, None, Web(files_dir=tmp_path))
    try:
        with TestClient(app) as client:
            answer = client.post("/translate", json={"q": "Un homme fait du vélo en ville.", "target": "en"}).json()
    finally:
        german.batcher.stop()
        french.batcher.stop()
    assert answer["translatedText"] == ".elliv ne olév ud tiaf emmoh nU"
    assert answer["detectedLanguage"]["language"] == "fr" and answer["detectedLanguage"]["confidence"] > 90
    assert german_engines.decoded == [] and french_engines.decoded == ["Un homme fait du vélo en ville."]


def test_html_alternatives_are_empty_and_its_size_bounded(tmp_path: Path) -> None:
    """LibreTranslate answers `alternatives: []` for HTML; a document is parsed whole, so it is bounded
    as a file is (max_file_bytes)."""
    app, batcher, _ = app_of(tmp_path, max_file_bytes=100)
    try:
        with TestClient(app) as client:
            small = client.post("/translate", json={"q": "<p>ab</p>", "format": "html", "alternatives": 2})
            large = client.post("/translate", json={"q": "<p>ab</p>" * 12, "format": "html"})
    finally:
        batcher.stop()
    assert small.json() == {"translatedText": "<p>AB</p>", "alternatives": [],
                            "detectedLanguage": {"confidence": 100.0, "language": "en"}}  # fmt: skip
    assert large.status_code == 413 and large.json() == {
        "error": "Invalid request: request (108) exceeds text limit (100); "
                 "'q' has 108 characters of HTML, more than max_file_bytes=100"}  # fmt: skip


def test_two_models_load_and_decode_on_one_engine_thread(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every PyTorch operation of a server with two models runs on one thread, so that they share one
    OpenMP pool (with a worker per model, two models kept 0.37 of the CLI's rate: engine_thread.py)."""
    from conftest import compose_config

    import seq2seq.serve.command as command
    from seq2seq.cli.serve import serve_plan
    from seq2seq.inference.job import DecodingJob
    from seq2seq.serve.engine_thread import EngineThread

    threads: list[tuple[str, int]] = []  # (what ran, on which thread)

    class Recording(UpperEngines):
        def translate_nbest(
            self, lines: list[str], prefixes: object, sources: object = None
        ) -> list[list[Translation]]:
            threads.append(("decode", threading.get_ident()))
            return super().translate_nbest(lines, prefixes, sources)

    def load(job: DecodingJob) -> Recording:
        threads.append(("load", threading.get_ident()))
        engines = Recording()
        target = "fr" if "fr" in job.model.run else "de"
        engines.languages = ModelLanguages(None, src_lang="en", tgt_lang=target)
        engines.name = "PyTorch"
        return engines

    monkeypatch.setattr(command, "Engines", load)
    engine_thread = EngineThread()
    plans = [serve_plan(compose_config("serve", [f"run={run}"])) for run in ("en-de", "en-fr")]
    served = [command._load(plan, plan.models[0], engine_thread) for plan in plans]
    app = create_app(served, Limits(16, 40, 8), None, None, Web(files_dir=tmp_path))
    with TestClient(app) as client:

        def ask(target: str) -> str:
            answer = client.post("/translate", json={"q": f"to {target}", "source": "en", "target": target})
            return answer.json()["translatedText"]

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(ask, ["de", "fr"] * 4)) == ["TO DE", "TO FR"] * 4
    for model in served:
        model.batcher.stop()
    assert [what for what, _ in threads[:2]] == ["load", "load"] and len(threads) >= 4
    assert {thread for _, thread in threads} == {engine_thread.call(threading.get_ident)}
    engine_thread.stop()


def test_two_models_of_one_direction_say_which_serves_it(tmp_path: Path, caplog) -> None:
    """`run=S run=M`, both en -> de: S (the first) serves it, M's is never used; start-up says so once,
    naming both, and the errors list each direction once (they said "en -> de, en -> de, en -> fr")."""
    first, first_engines = served_model("en", "de")
    second, second_engines = served_model("en", "de", change=lambda line: line[::-1])
    second = Served(second.batcher, second.settings, ServerInfo("other-en-de", "CTranslate2", "en", "de"))
    french, _ = served_model("en", "fr")
    with caplog.at_level(logging.INFO, logger="seq2seq.serve"):
        app = create_app([first, second, french], Limits(16, 40, 8), None, None, Web(files_dir=tmp_path))
    try:
        with TestClient(app) as client:
            answer = client.post("/translate", json={"q": "ab", "source": "en", "target": "de"}).json()
            missing = client.post("/translate", json={"q": "ab"}).json()
    finally:
        for model in (first, second, french):
            model.batcher.stop()
    assert answer == {"translatedText": "AB"} and second_engines.decoded == [] and first_engines.decoded == ["ab"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "en -> de: served by en-de; other-en-de's en -> de is not used (the first run= of a direction serves it)"
    ]
    assert "en -> fr: en-fr" in caplog.text and "en -> de: en-de" in caplog.text
    assert missing == {"error": "Invalid request: missing target parameter; this server translates en -> de, en -> fr"}
