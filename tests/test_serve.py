"""`seq2seq-serve` end to end: real servers in subprocesses on loopback, spoken to by the unmodified
LibreTranslate client, plain HTTP (httpx) and a headless Chromium (a page on another origin; the
server's own page is tests/test_serve_page.py's); their answers compared with what `seq2seq-translate`
writes for the same lines and settings."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config, train_logging
from omegaconf import OmegaConf

httpx = pytest.importorskip("httpx", reason="the server's tests need the dev extra: pip install -e '.[dev]'")
pytest.importorskip("uvicorn", reason="seq2seq-serve needs: pip install -e '.[serve]'")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="the dev extra installs the LibreTranslate client")

from seq2seq.cli.translate import translate  # noqa: E402
from seq2seq.config import DataConfig, TranslateConfig  # noqa: E402
from seq2seq.inference.job import decoding_job  # noqa: E402
from seq2seq.inference.settings import DecodingSettings  # noqa: E402
from seq2seq.inference.target_language import ModelLanguages  # noqa: E402

TRAIN = [*TINY_TRAIN, "max_steps=40", "valid_every=40", "save_every=20", "optim.lr=3e-3", "optim.warmup=10"]
SETTINGS = ["precision=fp32", "device=cpu", "threads=1"]  # the same for the server and for seq2seq-translate
LINES = ["a b c d", "e f g", "h i j k l", "", "m n", "b a", "q r s t a b", "c c c", "t s r q p o n"]
KEY = "k3y-0f-the-t3st"
JSON_TYPE = {"content-type": "application/json"}
DEMO_RUN = "outputs/2026-11-23/17-33-29"  # the run README.md's demo log prints


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve")
    train_logging(compose_config("train", [*TRAIN, f"data.cache_dir={root / 'cache'}"]), root / "run")
    assert (root / "run" / "ctranslate2" / "model.bin").is_file(), "training writes the CTranslate2 export"
    return root / "run"


def cli(tmp_path: Path, lines: list[str], **settings: object) -> list[str]:
    """What seq2seq-translate writes for `lines` (its work, translate(cfg), in this process)."""
    source, output = tmp_path / "cli-input.txt", tmp_path / "cli-output.txt"
    source.write_text("".join(line + "\n" for line in lines))
    defaults = {key: value for key, value in (s.split("=") for s in SETTINGS)}
    cfg = TranslateConfig(input=str(source), output=str(output), **{**defaults, "threads": 1, **settings})
    translate(OmegaConf.structured(cfg))
    return output.read_text().split("\n")[:-1]


class Server:
    """`python -m seq2seq.cli.serve ...` in a subprocess; its stderr is collected as it comes."""

    def __init__(self, *args: str, port: int = 0) -> None:
        command = [sys.executable, "-m", "seq2seq.cli.serve", f"port={port}", *SETTINGS, *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 120
        while not (
            found := [re.search(r"on (http://[\d.]+:\d+)$", line) for line in self.log if " on http://" in line]
        ):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("the server did not start:\n" + "\n".join(self.log))
            time.sleep(0.05)
        self.url = found[0].group(1)
        # One client for the test's threads: httpx.post would build a client (and its TLS context) each call.
        self.http = httpx.Client(limits=httpx.Limits(max_connections=200))
        self.port = int(self.url.rsplit(":", 1)[1])

    def _read(self) -> None:
        for line in self.process.stderr:
            self.log.append(line.rstrip("\n"))

    def post(self, path: str, body: object, timeout: float = 60) -> httpx.Response:
        # json.dumps, not httpx's json=: it writes a lone surrogate as its \\u escape, as a client may.
        content = json.dumps(body).encode()
        return self.http.post(self.url + path, content=content, headers=JSON_TYPE, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if hasattr(self, "http"):
            self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=30)
        self._reader.join(timeout=5)
        return code


def started(*args: str, port: int = 0) -> Server:
    return Server(*args, port=port)


@pytest.fixture(scope="module")
def server(run_dir: Path) -> Server:
    """engine=auto: the run's CTranslate2 export, as seq2seq-translate decodes it; batches logged (debug)."""
    running = started(f"run={run_dir}", "debug=true", "max_wait_ms=20", "max_request_lines=16", "max_line_chars=40")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def keyed_server(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """PyTorch, with API keys."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# one key per line\n{KEY}\nanother-key\n")
    running = started(f"run={run_dir}", "engine=torch", f"api_keys_file={keys}", "beam=3", "debug=true")
    yield running
    assert running.stop() == 0


def test_the_libretranslate_client_gets_what_seq2seq_translate_writes(server: Server, run_dir: Path, tmp_path) -> None:
    client = libretranslatepy.LibreTranslateAPI(server.url)
    assert [client.translate(line, "src", "tgt") for line in LINES] == cli(tmp_path, LINES, run=str(run_dir))
    assert client.languages() == [
        {"code": "src", "name": "src", "targets": ["tgt"]},
        {"code": "tgt", "name": "tgt", "targets": []},
    ]
    assert "engine: CTranslate2" in "\n".join(server.log)


def test_the_libretranslate_client_with_a_key_on_pytorch(keyed_server: Server, run_dir: Path, tmp_path) -> None:
    client = libretranslatepy.LibreTranslateAPI(keyed_server.url, api_key=KEY)
    expected = cli(tmp_path, LINES, run=str(run_dir), engine="torch", beam=3)
    assert [client.translate(line, "src", "tgt") for line in LINES] == expected
    # Several lines in one string: translated line by line, as seq2seq-translate does a file.
    assert client.translate("\n".join(LINES), "src", "tgt") == "\n".join(expected)
    assert "engine: PyTorch" in "\n".join(keyed_server.log)


def test_an_api_key_is_required_compared_and_never_logged(keyed_server: Server) -> None:
    for body, error in (  # LibreTranslate's texts
        ({"q": "a b"}, "Please contact the server operator to get an API key"),
        ({"q": "a b", "api_key": "wrong"}, "Invalid API key"),
        ({"q": "a b", "api_key": KEY[:-1]}, "Invalid API key"),
        ({"q": "a b", "api_key": 7}, "Invalid API key"),
    ):
        answer = keyed_server.post("/translate", body)
        assert answer.status_code == 403 and answer.json() == {"error": error}
    assert keyed_server.post("/translate", {"q": "a b", "api_key": "another-key"}).status_code == 200
    form = httpx.post(keyed_server.url + "/translate", data={"q": "a b", "api_key": KEY}, timeout=60)
    assert form.status_code == 200 and isinstance(form.json()["translatedText"], str)
    assert keyed_server.post("/v1/attention", {"q": "a b"}).status_code == 403
    assert not any(KEY in line or "another-key" in line for line in keyed_server.log)


def test_64_concurrent_requests_each_get_their_own_translation(server: Server, run_dir: Path, tmp_path) -> None:
    letters = "abcdefghijklmnopqrst"
    requests = [[" ".join(letters[(i * 7 + j * 3) % 20] for j in range(3 + i % 9))] for i in range(64)]
    for i in range(0, 64, 8):  # some requests send several lines
        requests[i] = [requests[i][0], requests[(i + 1) % 64][0], ""]
    expected = cli(tmp_path, [line for lines in requests for line in lines], run=str(run_dir))
    with ThreadPoolExecutor(64) as pool:
        answers = list(pool.map(lambda lines: server.post("/translate", {"q": lines}, timeout=120), requests))
    offset = 0
    for lines, answer in zip(requests, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json()["translatedText"] == expected[offset : offset + len(lines)]
        offset += len(lines)
    batched = [int(m.group(1)) for line in server.log if (m := re.search(r"batch: (\d+) requests", line))]
    assert max(batched) > 1, "concurrent requests are decoded together"


TOO_MANY = {"q": ["a"] * 17}
BAD_INPUTS = [  # (body, status, what the error names); the server allows 16 lines of 40 characters
    (b'{"q": "a b", ', 400, "malformed JSON"),
    (b'["a b"]', 400, "JSON object"),
    ({"source": "src"}, 400, "Invalid request: missing q parameter"),
    ({"q": ["a b", 3]}, 400, "q[1] is int"),
    ({"q": None}, 400, "'q' is NoneType"),
    ({"q": []}, 400, "empty list"),
    (TOO_MANY, 413, "Invalid request: request (17) exceeds text limit (16); 'q' has 17 lines, more than max_r"),
    ({"q": "a\n" * 16 + "b"}, 413, "17 lines"),
    ({"q": ["a", "b " * 30]}, 413, "q[1] has 60 characters, more than max_line_chars=40"),
    ({"q": "a", "source": "fr"}, 400, "fr is not supported"),
    ({"q": "a", "target": "de"}, 400, "de is not supported"),
    ({"q": "a", "target": "src"}, 400, "src (src) is not available as a target language; this server translates src"),
    ({"q": "a", "format": "xml"}, 400, "xml format is not supported; format is 'text' or 'html'"),
    ({"q": "a", "alternatives": -1}, 400, "Invalid request: alternatives parameter must be >= 0"),
    # Issue 49: each of these was a 500 (or, for alternatives, a beam of 100001 that held every client).
    (b'{"q": "a \\ud800 b"}', 400, "'q' holds a lone surrogate (U+D800)"),
    (b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 400, "malformed JSON: nested too deeply"),
    (
        {"q": "a", "alternatives": 100000},
        400,
        "alternatives parameter must be <= 31; alternatives=100000 (max_beam=32)",
    ),
]
NATIVE_BAD_INPUTS = [  # /v1/translate: the config's own one-line messages
    ({"q": "a", "beam": 0}, "config error: beam=0: must be positive"),
    ({"q": "a", "beam": 2, "nbest": 3}, "config error: nbest=3: must be in [1, beam=2]"),
    ({"q": "a", "beam": 2.5}, "config error: beam=2.5: must be int"),
    ({"q": "a", "sampling": True, "temperature": 0}, "config error: temperature=0.0: must be > 0"),
    ({"q": "a", "sampling": True, "top_p": 1.5}, "config error: top_p=1.5: must be in (0, 1]"),
    ({"q": "a", "sampling": True, "top_k": -1}, "config error: top_k=-1: must be >= 0"),
    ({"q": ["a"], "prefix": "A"}, "'prefix' must be"),
    ({"q": "a\nb"}, "q holds a newline"),
    ({"q": "a", "beem": 3}, "unknown key 'beem'"),
    # Issue 49: each of these was a 500; JSON's NaN and 1e999 (inf) are sent as raw bytes below.
    ({"q": "a", "beam": 33}, "config error: beam=33: must be at most max_beam=32"),
    (b'{"q": "a", "beam": NaN}', "config error: beam=nan: must be a finite number"),
    (b'{"q": "a", "beam": 1e999}', "config error: beam=inf: must be a finite number"),
    (b'{"q": "a", "length_penalty": NaN}', "config error: length_penalty=nan: must be a finite number"),
    ({"q": "a", "sampling": True, "seed": 1e30}, "config error: seed=1000000000000000019884624838656: must be in"),
    (b'{"q": "a", "sampling": true, "temperature": 1e999}', "config error: temperature=inf: must be a finite"),
]


@pytest.mark.parametrize(("body", "status", "error"), BAD_INPUTS, ids=[e for _, _, e in BAD_INPUTS])
def test_bad_input_is_its_status_and_one_line_naming_it(server: Server, body, status: int, error: str) -> None:
    if isinstance(body, bytes):
        answer = httpx.post(server.url + "/translate", content=body, headers={"content-type": "application/json"})
    else:
        answer = server.post("/translate", body)
    assert answer.status_code == status and error in answer.json()["error"], answer.text
    assert "\n" not in answer.json()["error"]


@pytest.mark.parametrize(("body", "error"), NATIVE_BAD_INPUTS, ids=[e for _, e in NATIVE_BAD_INPUTS])
def test_native_bad_settings_get_the_configs_messages(server: Server, body, error: str) -> None:
    if isinstance(body, bytes):
        answer = httpx.post(server.url + "/v1/translate", content=body, headers={"content-type": "application/json"})
    else:
        answer = server.post("/v1/translate", body)
    assert answer.status_code == 400 and error in answer.json()["error"], answer.text


def test_settings_a_forced_engine_cannot_decode_fail_that_request_alone(run_dir: Path) -> None:
    """engine=ctranslate2 cannot sample (seq2seq-translate refuses it alike): 400 with the config's
    message, chosen on the engine's thread; the next request is translated."""
    running = started(f"run={run_dir}", "engine=ctranslate2")
    try:
        answer = running.post("/v1/translate", {"q": "a b", "sampling": True})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"].startswith("config error: engine=ctranslate2: sampling=true")
        assert running.post("/v1/translate", {"q": "a b"}).status_code == 200
    finally:
        assert running.stop() == 0


def test_bad_requests_among_good_ones_hurt_none(server: Server, run_dir: Path, tmp_path) -> None:
    good = LINES[:5]
    expected = cli(tmp_path, good, run=str(run_dir))
    bodies = [{"q": line} for line in good] + [body for body, _, _ in BAD_INPUTS if isinstance(body, dict)]
    bodies += [{"q": "a", "api_key": "\udc00"}]  # (no keys on this server: still not Unicode text)
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda body: server.post("/translate", body), bodies))
    assert [a.json()["translatedText"] for a in answers[: len(good)]] == expected
    assert [a.status_code for a in answers[len(good) :]] == [s for b, s, _ in BAD_INPUTS if isinstance(b, dict)] + [400]
    assert server.post("/translate", {"q": ""}).json() == {
        "translatedText": "",
        "detectedLanguage": {"confidence": 100.0, "language": "src"},
    }


def test_query_string_form_and_json_posts_get_what_seq2seq_translate_writes(server: Server, run_dir, tmp_path) -> None:
    """LibreTranslate's clients send parameters in any of the three; a form's CRLF is LF (a stray CR
    changed the translation); the line limit is per line (three lines of 30 characters pass at 40)."""
    lines = ["a b c d", "e f g h i j k l m n o p q r s t a b c d", "h i j k l"]
    expected = cli(tmp_path, lines, run=str(run_dir))
    query = server.http.post(server.url + "/translate", params={"q": lines[0], "source": "src", "target": "tgt"})
    form = server.http.post(server.url + "/translate", data={"q": "\r\n".join(lines), "secret": "x"})
    body = server.post("/translate", {"q": "\n".join(lines), "source": "src", "secret": "x"})
    assert query.json() == {"translatedText": expected[0]}
    assert form.json()["translatedText"] == body.json()["translatedText"] == "\n".join(expected)


def test_sentences_html_and_files_get_what_seq2seq_translate_writes(server: Server, run_dir, tmp_path) -> None:
    """Each sentence, text node, line, subtitle and paragraph is what seq2seq-translate writes for it."""
    docx = pytest.importorskip("docx")
    units = ["Ab cd.", "Ef gh!", "a b c", "d e", "f g h", "i j"]
    one = dict(zip(units, cli(tmp_path, units, run=str(run_dir)), strict=True))
    split = server.post("/translate", {"q": "Ab cd.  Ef gh!"}).json()["translatedText"]
    assert split == f"{one['Ab cd.']}  {one['Ef gh!']}"
    html = '<p class="k">a b c</p><p>d e <b title="x">f g h</b></p>'
    page = server.post("/translate", {"q": html, "format": "html"}).json()["translatedText"]
    assert page == f'<p class="k">{one["a b c"]}</p><p>{one["d e"]} <b title="x">{one["f g h"]}</b></p>'

    def translated(name: str, data: bytes) -> bytes:
        answer = server.http.post(server.url + "/translate_file", files={"file": (name, data)}, timeout=60)
        assert answer.status_code == 200, answer.text
        return server.http.get(answer.json()["translatedFileUrl"]).content

    assert translated("a.txt", b"a b c\nd e\n").decode() == f"{one['a b c']}\n{one['d e']}\n"
    assert translated("a.html", html.encode()).decode() == page
    subtitles = translated("a.srt", b"1\n00:00:01,000 --> 00:00:02,000\na b c\nd e\n\n")
    assert subtitles.decode() == f"1\n00:00:01,000 --> 00:00:02,000\n{one['a b c']}\n{one['d e']}\n\n"
    document = docx.Document()
    document.add_paragraph("f g h")
    document.add_table(rows=1, cols=1).cell(0, 0).text = "i j"
    saved = tmp_path / "a.docx"
    document.save(saved)
    back = docx.Document(io.BytesIO(translated("a.docx", saved.read_bytes())))
    assert [p.text for p in back.paragraphs] == [one["f g h"]]
    assert back.tables[0].cell(0, 0).text == one["i j"]


def test_libretranslate_clients_routes_cors_and_json_errors(server: Server) -> None:
    client = libretranslatepy.LibreTranslateAPI(server.url)
    # py3langid knows neither "src" nor "tgt": LibreTranslate's answer when it cannot tell.
    assert client.detect("a b c") == [{"confidence": 0.0, "language": "src"}]
    settings = server.http.get(server.url + "/frontend/settings").json()
    assert settings["language"]["source"] == {"code": "src", "name": "src"}
    assert set(server.http.get(server.url + "/spec").json()["paths"]) >= {"/translate", "/detect", "/languages"}
    missing = server.http.get(server.url + "/suggest")
    assert missing.status_code == 404 and missing.json() == {"error": "no route /suggest (see GET /spec)"}
    preflight = server.http.options(
        server.url + "/translate",
        headers={"Origin": "https://page.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"},
    )  # fmt: skip
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == "*"


def _run_as(run_dir: Path, folder: Path, source: str, target: str) -> Path:
    """A copy of the test's run whose saved config says it translates source -> target."""
    shutil.copytree(run_dir, folder, ignore=shutil.ignore_patterns(".lock"))
    (folder / ".hydra").mkdir(exist_ok=True)  # what seq2seq-train writes there, of it the languages
    OmegaConf.save({"data": {"src_lang": source, "tgt_lang": target}}, folder / ".hydra" / "config.yaml")
    return folder


def test_two_models_serve_each_pair_and_pivot_as_seq2seq_translate_twice(run_dir: Path, tmp_path: Path) -> None:
    """`run=A run=B`: A en -> de, B de -> fr; en -> fr is A's translation translated by B, sentence by
    sentence, as seq2seq-translate writes them with A, then with B."""
    first, second = _run_as(run_dir, tmp_path / "a", "en", "de"), _run_as(run_dir, tmp_path / "b", "de", "fr")
    lines = ["a b c d", "e f g", "h i j k l"]
    through_a = cli(tmp_path, lines, run=str(first))
    through_both = cli(tmp_path, through_a, run=str(second))
    running = started(f"run={first}", f"run={second}", "debug=true")
    try:
        client = libretranslatepy.LibreTranslateAPI(running.url)
        assert [client.translate(line, "en", "de") for line in lines] == through_a
        assert [client.translate(line, "de", "fr") for line in through_a] == through_both
        assert [client.translate(line, "en", "fr") for line in lines] == through_both
        assert [(lang["code"], lang["name"], lang["targets"]) for lang in client.languages()] == [
            ("en", "English", ["de", "fr"]), ("de", "German", ["fr"]), ("fr", "French", [])]  # fmt: skip
    finally:
        assert running.stop() == 0
    log = "\n".join(running.log)
    assert f"en -> fr: through de ({first}, then {second})" in log and "en -> fr through de" in log


def test_an_export_served_away_from_its_run_names_the_languages_it_records(run_dir: Path, tmp_path: Path) -> None:
    """A CTranslate2 export copied out of its run has no .hydra/ beside it; its seq2seq.json records the
    languages it was trained on, and /languages lists those (it listed src -> tgt)."""
    exported = tmp_path / "en-de"
    shutil.copytree(run_dir / "ctranslate2", exported)
    record = json.loads((exported / "seq2seq.json").read_text())
    record["data"] = {**record.get("data", {}), "src_lang": "en", "tgt_lang": "de"}
    (exported / "seq2seq.json").write_text(json.dumps(record))
    running = started(f"checkpoint={exported}")
    try:
        client = libretranslatepy.LibreTranslateAPI(running.url)
        assert [(lang["code"], lang["targets"]) for lang in client.languages()] == [("en", ["de"]), ("de", [])]
        assert client.translate("a b c d", "en", "de") == cli(tmp_path, ["a b c d"], checkpoint=str(exported))[0]
    finally:
        assert running.stop() == 0


def test_native_api_gives_what_the_command_gives(server: Server, run_dir: Path, tmp_path) -> None:
    """n-best lists with scores, prefixes and seeded samples: the lines (and scores, to the 4 decimals
    the command prints) seq2seq-translate writes with the same settings, on the engine it picks."""
    lines = ["a b c d", "e f g", "h i j"]

    def moses(answer: dict) -> list[str]:
        return [f"{i} ||| {h['text']} ||| {h['score']:.4f}" for i, hyps in enumerate(answer["nbest"]) for h in hyps]

    nbest = server.post("/v1/translate", {"q": lines, "beam": 3, "nbest": 2}).json()
    assert moses(nbest) == cli(tmp_path, lines, run=str(run_dir), beam=3, nbest=2)
    settings = {"sampling": True, "nbest": 3, "seed": 7, "top_k": 5}
    sampled = [server.post("/v1/translate", {"q": lines, **settings}).json() for _ in range(2)]
    assert sampled[0] == sampled[1], "the same seed, the same samples"
    assert moses(sampled[0]) == cli(tmp_path, lines, run=str(run_dir), **settings)
    for beam in (1, 3):
        prefixed = server.post("/v1/translate", {"q": lines, "prefix": ["D", "", "Q R"], "beam": beam}).json()
        command = cli(tmp_path, ["a b c d\tD", "e f g", "h i j\tQ R"], run=str(run_dir), prefix=True, beam=beam)
        assert prefixed["translatedText"] == command
        assert command[0].startswith("D") and command[2].startswith("Q R")


def test_the_server_refuses_to_start_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    """Each refusal names what is wrong; no case needs a fixed port to be free (port 5000 taken by a
    LibreTranslate beside it failed the suite). Where the model is missing and the port the server would
    use is taken, the model is named: it is what the user typed wrong."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = f"port={busy.getsockname()[1]}"
    cases = [
        ([f"run={tmp_path / 'nothing'}", taken], f"{tmp_path / 'nothing'}: no such run directory"),
        ([f"run={run_dir}", f"run={tmp_path / 'other'}", taken], f"{tmp_path / 'other'}: no such run directory"),
        ([f"checkpoint={tmp_path / 'no.pt'}", taken], f"{tmp_path / 'no.pt'}: no such checkpoint file"),
        ([f"run={run_dir}", taken], "already in use"),
        ([f"run={run_dir}", "prot=0"], "prot: unknown key; did you mean port?"),
        ([f"run={run_dir}", "max_wait_ms=-1", taken], "config error: max_wait_ms=-1"),
        ([f"run={run_dir}", f"api_keys_file={tmp_path / 'no-keys'}", taken], "api_keys_file="),
        # it loaded the model twice, and the second copy served nothing
        (
            [f"run={run_dir}", f"runs=[{run_dir}/.]", taken],
            f"runs: {run_dir}/. is {run_dir} again; give each model once",
        ),
    ]
    try:
        for args, expected in cases:
            done = subprocess.run(
                [sys.executable, "-m", "seq2seq.cli.serve", *args], capture_output=True, text=True, timeout=120
            )
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            assert done.returncode == 2 and len(errors) == 1 and expected in errors[0], done.stderr
    finally:
        busy.close()


def test_sigterm_finishes_the_requests_in_flight_and_a_restart_serves_the_same(run_dir: Path, tmp_path) -> None:
    first = started(f"run={run_dir}", "max_wait_ms=5000")
    # A lone request does not wait max_wait_ms (5 s) for others: nobody else is in the server. (It took
    # 1.2 s on a 2-core machine running three trainings: half of max_wait_ms still tells the two apart.)
    start = time.monotonic()
    assert first.post("/translate", {"q": "a b c"}).status_code == 200
    assert time.monotonic() - start < 2.5
    # One request whose body is still arriving when the signal comes (uvicorn has begun handling it),
    # and a burst that waits for it in the batcher (it may join their batch): all in flight.
    body = b'{"q": "a b c d e"}'
    slow = socket.create_connection(("127.0.0.1", first.port))
    slow.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
    slow.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
    time.sleep(0.3)
    lines = [line for line in LINES * 2 if line]  # an empty string is answered at once, with no decoding

    def request(line: str) -> tuple[httpx.Response, float]:
        answer = first.post("/translate", {"q": line})
        return answer, time.monotonic()

    with ThreadPoolExecutor(len(lines)) as pool:
        answers = [pool.submit(request, line) for line in lines]
        time.sleep(2.0)  # they wait for the slow one (5 s at most): time to arrive on a busy machine
        signalled = time.monotonic()
        first.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        slow.sendall(body[5:])
        results = [a.result() for a in answers]
    reply = b""
    while not reply.endswith(b"}"):
        reply += slow.recv(4096)
    slow.close()
    # It ends by the SIGTERM above; stop() would send another, which kills it by the signal when it lands
    # after uvicorn has given the handlers back (the exit -15 seen on a busy machine).
    assert first.process.wait(timeout=30) == 0
    first.stop()
    assert all(finished > signalled for _, finished in results), "the requests were in flight at the signal"
    assert [r.status_code for r, _ in results] == [200] * len(lines)
    assert [r.json()["translatedText"] for r, _ in results] == cli(tmp_path, lines, run=str(run_dir))
    assert (
        reply.startswith(b"HTTP/1.1 200")
        and json.loads(reply.split(b"\r\n\r\n", 1)[1])["translatedText"]
        == cli(tmp_path, ["a b c d e"], run=str(run_dir))[0]
    )
    # Killed without warning, started again on the same port: the same translations.
    again = started(f"run={run_dir}", port=first.port)
    before = again.post("/translate", {"q": LINES}).json()
    again.stop(signal.SIGKILL)
    restarted = started(f"run={run_dir}", port=again.port)
    try:
        assert restarted.post("/translate", {"q": LINES}).json() == before
        assert before["translatedText"] == cli(tmp_path, LINES, run=str(run_dir))
    finally:
        assert restarted.stop(signal.SIGINT) == 0


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


CROSS_ORIGIN_PAGE = """<!doctype html><html><body><pre id="out"></pre><script>
(async () => {
  const server = new URLSearchParams(location.search).get("server");
  const json = {method: "POST", headers: {"Content-Type": "application/json"},
                body: JSON.stringify({q: ["a b c d", "e f g"], source: "src", target: "tgt", format: "text"})};
  const form = new URLSearchParams({q: "h i j k l", source: "src", target: "tgt", secret: "x"});
  const results = {
    json: await (await fetch(server + "/translate", json)).json(),
    form: await (await fetch(server + "/translate", {method: "POST", body: form})).json(),
    languages: await (await fetch(server + "/languages")).json(),
    missing: await (await fetch(server + "/nope")).json(),
  };
  document.getElementById("out").textContent = JSON.stringify(results);
})().catch(err => { document.getElementById("out").textContent = "failed: " + err; });
</script></body></html>"""


@pytest.mark.skipif(
    _chromium() is None,
    reason="no chromium/chromedriver: apt-get install -y chromium chromium-driver (CI installs them)",
)
def test_a_page_on_another_origin_calls_the_libretranslate_routes_in_a_browser(
    server: Server, run_dir: Path, tmp_path: Path
) -> None:
    """A page served from another origin (another port) posts JSON (a CORS preflight) and a form with
    fetch, as LibreTranslate's web clients do; the browser lets it read the answers."""
    pytest.importorskip("selenium", reason="the dev extra installs selenium")
    import http.server
    import urllib.parse

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    (tmp_path / "page.html").write_text(CROSS_ORIGIN_PAGE)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    browser, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        query = urllib.parse.urlencode({"server": server.url})
        driver.get(f"http://127.0.0.1:{origin.server_address[1]}/page.html?{query}")
        WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "out").text)
        shown = driver.find_element(By.ID, "out").text
    finally:
        driver.quit()
        origin.shutdown()
    assert not shown.startswith("failed"), shown
    results = json.loads(shown)
    expected = cli(tmp_path, ["a b c d", "e f g", "h i j k l"], run=str(run_dir))
    assert results["json"] == {"translatedText": expected[:2]}
    assert results["form"]["translatedText"] == expected[2]
    assert results["languages"][0] == {"code": "src", "name": "src", "targets": ["tgt"]}
    assert results["missing"] == {"error": "no route /nope (see GET /spec)"}


def test_answers_are_not_held_back_by_delayed_acks(server: Server) -> None:
    """A response written as headers then body must not wait for the client's delayed ACK (about 40 ms
    on Linux): the listening socket says it is TCP, so asyncio sets TCP_NODELAY on each connection."""
    with httpx.Client(base_url=server.url) as client:  # one keep-alive connection
        times = []
        for _ in range(15):
            start = time.perf_counter()
            client.get("/health").raise_for_status()
            times.append(time.perf_counter() - start)
    assert sorted(times)[7] < 0.025, f"median {1000 * sorted(times)[7]:.1f} ms"


def test_serve_parses_its_command_line_as_hydra_composes_it() -> None:
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import ServeConfig

    argv = ["run=some/run", "port=0", "beam=3", "max_wait_ms=2.5", "engine=torch"]
    assert OmegaConf.to_container(parse_key_values(argv, ServeConfig)) == OmegaConf.to_container(
        compose_config("serve", argv)
    )


def test_a_client_that_goes_away_costs_no_decoding(run_dir: Path) -> None:
    running = started(f"run={run_dir}", "max_wait_ms=5000", "debug=true")
    try:
        # A request whose body is still arriving keeps the next one waiting in the batcher ...
        slow_body = b'{"q": "a b"}'
        slow = socket.create_connection(("127.0.0.1", running.port))
        slow.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        slow.sendall(b"Content-Length: %d\r\n\r\n" % len(slow_body) + slow_body[:3])
        time.sleep(0.3)
        # ... whose client sends three lines and hangs up before the answer.
        body = b'{"q": ["c d", "e f", "g h"]}'
        gone = socket.create_connection(("127.0.0.1", running.port))
        gone.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
        gone.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        time.sleep(0.5)
        gone.close()
        time.sleep(0.5)
        slow.sendall(slow_body[3:])
        reply = b""
        while not reply.endswith(b"}"):
            reply += slow.recv(4096)
        slow.close()
        assert reply.startswith(b"HTTP/1.1 200")
        assert running.post("/translate", {"q": "a"}).status_code == 200  # and it serves on
    finally:
        assert running.stop() == 0
    decoded = [int(m.group(1)) for line in running.log if (m := re.search(r"requests, (\d+) lines", line))]
    assert decoded == [1, 1], running.log
    assert any("went away" in line for line in running.log)


class _CountingTokenizer:
    """A source tokenizer that counts the texts it encodes, and encodes them with the real one."""

    def __init__(self, real: object) -> None:
        self.real, self.texts = real, 0

    def encode(self, text: str, **options: object) -> object:
        self.texts += 1
        return self.real.encode(text, **options)

    def encode_batch(self, texts: list[str], **options: object) -> list[object]:
        self.texts += len(texts)
        return self.real.encode_batch(texts, **options)

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_a_request_is_tokenized_once(run_dir: Path, tmp_path: Path, engine: str) -> None:
    """The batcher counts a request's tokens (max_batch_tokens) with the ids the engine then decodes:
    each line goes through the source tokenizer once (it went twice, once for each), and the lines are
    those seq2seq-translate writes."""
    import asyncio

    from seq2seq.data.tokenizer import Tokenizers
    from seq2seq.inference.settings import DecodingSettings as Settings
    from seq2seq.serve.batcher import Batcher
    from seq2seq.serve.engines import Engines

    job = decoding_job(TranslateConfig(run=str(run_dir), engine=engine, precision="fp32", device="cpu", threads=1))
    batcher = Batcher(lambda: Engines(job), job.settings, 1024, 1)
    batcher.start()
    try:
        main = batcher.engines.main
        counting = _CountingTokenizer(main.tokenizers.src)
        main.tokenizers = Tokenizers(counting, main.tokenizers.tgt, main.tokenizers.joint)
        lines = asyncio.run(batcher.translate(LINES, Settings(beam=5)))
    finally:
        batcher.stop()
    assert batcher.engines.main_kind == engine
    assert counting.texts == len(LINES)
    assert [nbest[0].text for nbest in lines] == cli(tmp_path, LINES, run=str(run_dir), engine=engine)


def test_the_pytorch_engine_loaded_later_decodes_the_model_resolved_at_start(run_dir: Path, tmp_path: Path) -> None:
    """A server decoding with the run's CTranslate2 export loads PyTorch's engine at its first n-best
    request. It reads the model file resolved at start; one written again since (a training resumed in
    the run) is refused in one line, not decoded beside an export made from the model it replaced."""
    from seq2seq.config import UserError
    from seq2seq.serve.engines import Engines

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    job = decoding_job(TranslateConfig(run=str(copy), precision="fp32", device="cpu", threads=1))
    unchanged, replaced = Engines(job), Engines(job)
    assert unchanged.main_kind == replaced.main_kind == "ctranslate2"
    assert unchanged.torch().kind == "torch"
    model_file = Path(replaced.files.model_file)
    assert model_file.parent.parent == copy
    status = model_file.stat()
    os.utime(model_file, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    with pytest.raises(UserError, match=f"^{re.escape(str(model_file))}: written again since the model was loaded"):
        replaced.torch()


def test_a_server_of_a_ctranslate2_model_never_imports_torch(run_dir: Path) -> None:
    # The engine thread imported torch at start for its sharing watch, whatever the engine: +100 MB
    # and seconds of start-up for a server that never runs PyTorch (issue 63).
    code = (
        "import asyncio, sys\n"
        "from seq2seq.config import TranslateConfig\n"
        "from seq2seq.inference.job import decoding_job\n"
        "from seq2seq.serve.batcher import Batcher\n"
        "from seq2seq.serve.engines import Engines\n"
        "from seq2seq.inference.settings import DecodingSettings as Settings\n"
        f"job = decoding_job(TranslateConfig(checkpoint={str(run_dir / 'ctranslate2')!r}))\n"
        "batcher = Batcher(lambda: Engines(job), job.settings, 1024, 1)\n"
        "batcher.start()\n"
        "lines = asyncio.run(batcher.translate(['a b c'], Settings(beam=5)))\n"
        "batcher.stop()\n"
        "print(batcher.engines.main_kind, len(lines), 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["ctranslate2", "1", "False"], done.stdout + done.stderr


def test_the_server_never_imports_training() -> None:
    code = (
        "import sys, seq2seq.serve.command, seq2seq.cli.serve\n"
        "print(sorted(m for m in sys.modules if m.startswith('seq2seq.train')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


class _RecordingEngines:
    """Stands in for Engines: records the thread each of its calls runs on."""

    def __init__(self, calls: list[tuple[str, int]]) -> None:
        calls.append(("load", threading.get_ident()))
        self.calls = calls
        self.batches: list[int] = []  # lines per decoded batch
        self.seconds = 0.0  # each batch's decoding time
        self.main = self  # the engine a request is tokenized with (translator_api.encode_sources)
        self.tokenizers, self.languages, self.max_positions = self, ModelLanguages(None), 256

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[1] * len(line.split()) for line in lines]

    def kind(self, settings: object) -> str:
        self.calls.append(("kind", threading.get_ident()))  # may load or time an engine (int8_probe)
        return "ctranslate2"

    def for_settings(self, settings: object) -> _RecordingEngines:
        self.kind(settings)
        return self

    def decoding_with(self, settings: object) -> _RecordingEngines:
        return self

    def translate_nbest(self, lines: list[str], prefixes: object, sources: object = None) -> list[list[object]]:
        from seq2seq.inference.translator_api import Translation

        self.calls.append(("decode", threading.get_ident()))
        self.batches.append(len(lines))
        time.sleep(self.seconds)
        return [[Translation(line.upper(), 0.0, [])] for line in lines]


def test_the_engine_is_loaded_and_used_on_the_worker_thread_alone() -> None:
    """GNU OpenMP keeps a pool of workers per thread that starts parallel work; with a second pool on
    the cores, a PyTorch request took 1.6x its time (docs/performance.md, "Serving"), so the worker
    thread that decodes also loads the model, and no other thread touches it: choosing a request's
    engine may load one or time both (engine=auto on a bf16 CPU), so that runs there too."""
    import asyncio

    from seq2seq.inference.settings import DecodingSettings as Settings
    from seq2seq.serve.batcher import Batcher

    calls: list[tuple[str, int]] = []
    batcher = Batcher(lambda: _RecordingEngines(calls), DecodingSettings(), max_batch_tokens=64, max_wait_ms=1)
    batcher.start()
    try:
        assert asyncio.run(batcher.translate(["a b", "c"], Settings(beam=1)))[1][0].text == "C"
    finally:
        batcher.stop()
    assert [name for name, _ in calls] == ["load", "kind", "decode"]
    threads = {ident for _, ident in calls}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_the_worker_narrows_to_one_thread_when_other_work_arrives(monkeypatch, caplog) -> None:
    """A server that started on an idle machine spins its OpenMP threads long; when other work comes,
    the worker (the thread whose thread count decoding uses) goes to one thread between batches."""
    import asyncio

    import torch  # noqa: F401  (a PyTorch engine's server: the watch narrows PyTorch's threads)

    from seq2seq import cpu_sharing
    from seq2seq.inference.settings import DecodingSettings as Settings
    from seq2seq.serve.batcher import Batcher

    set_on: list[tuple[int, int]] = []
    start = time.monotonic()

    def fast_watch(threads: int, set_threads: object) -> cpu_sharing.SharingWatch:
        return cpu_sharing.SharingWatch(  # the fake machine: other work takes one core from the start
            2, lambda n: set_on.append((n, threading.get_ident())), every_seconds=0.0, cores=2,
            machine_seconds=lambda: time.monotonic() - start, process_seconds=lambda: 0.0,
        )  # fmt: skip

    monkeypatch.setattr(cpu_sharing, "watch_for_sharing", fast_watch)
    calls: list[tuple[str, int]] = []
    batcher = Batcher(lambda: _RecordingEngines(calls), DecodingSettings(), max_batch_tokens=64, max_wait_ms=1)
    batcher.start()
    try:
        with caplog.at_level(logging.INFO, logger="seq2seq.serve"):
            asyncio.run(batcher.translate(["a b"], Settings(beam=1)))
            asyncio.run(batcher.translate(["c"], Settings(beam=1)))
    finally:
        batcher.stop()
    decoding_thread = calls[-1][1]
    assert set_on == [(1, decoding_thread)], set_on
    assert "running on 1 thread while it lasts" in caplog.text


def test_an_engine_that_fails_to_load_fails_the_start() -> None:
    from seq2seq.config import UserError
    from seq2seq.serve.batcher import Batcher

    def broken() -> None:
        raise UserError("run=/nowhere: no such run directory")

    with pytest.raises(UserError, match="/nowhere"):
        Batcher(broken, DecodingSettings(), max_batch_tokens=64, max_wait_ms=1).start()


def test_clients_that_send_one_line_at_a_time_share_one_batch() -> None:
    """Each client sends its next line as soon as it has its answer, 0-28 ms later. The engine waits
    (up to max_wait_ms) for the clients it has just answered: the batches settle at one line from
    each client, not at two groups that take turns with the engine (as they did: 17 of 32 a batch)."""
    import asyncio

    from seq2seq.inference.settings import DecodingSettings as Settings
    from seq2seq.serve.batcher import Batcher

    engines: list[_RecordingEngines] = []

    def load() -> _RecordingEngines:
        engines.append(_RecordingEngines([]))
        engines[0].seconds = 0.02
        return engines[0]

    batcher = Batcher(load, DecodingSettings(), max_batch_tokens=4096, max_wait_ms=2000)
    batcher.start()

    async def client(number: int) -> None:
        name = f"client{number}"
        for turn in range(6):
            answer = await batcher.translate([f"{name} {turn}"], Settings(beam=1))
            assert answer[0][0].text == f"{name} {turn}".upper()  # its own line back
            await asyncio.sleep(0.004 * number)  # the answer's way back and the next request's way in

    async def clients() -> None:
        await asyncio.gather(*(client(number) for number in range(8)))

    try:
        asyncio.run(clients())
    finally:
        batcher.stop()
    assert engines[0].batches[-3:] == [8, 8, 8], engines[0].batches


def test_a_sentencepiece_run_serves_what_seq2seq_translate_writes(sentencepiece_run: Path, tmp_path: Path) -> None:
    """data.tokenizer=sentencepiece: the server reads the run's SentencePiece files and decodes with
    its CTranslate2 export, whose vocabulary has no <s> (only <pad> is suppressed)."""
    from conftest import SENTENCEPIECE_LINES

    running = started(f"run={sentencepiece_run}")
    try:
        client = libretranslatepy.LibreTranslateAPI(running.url)
        served = [client.translate(line, "src", "tgt") for line in SENTENCEPIECE_LINES]
    finally:
        assert running.stop() == 0
    assert served == cli(tmp_path, SENTENCEPIECE_LINES, run=str(sentencepiece_run))
    assert "engine: CTranslate2" in "\n".join(running.log)


def test_a_multilingual_model_serves_every_direction_with_its_tag(multilingual_run, tmp_path) -> None:
    """In process: /languages lists the model's directions (and de -> fr through en, a pivot), and
    /translate and /v1/translate route by source and target, decoding as seq2seq-translate tgt_lang=."""
    from starlette.testclient import TestClient

    from seq2seq.cli.serve import serve_plan
    from seq2seq.config import ServeConfig
    from seq2seq.serve.app import create_app
    from seq2seq.serve.command import _load
    from seq2seq.serve.requests import Limits

    run = str(multilingual_run.path)
    plan = serve_plan(ServeConfig(run=run, beam=2, precision="fp32", device="cpu", threads=1))
    served = _load(plan, plan.models[0])
    lines = {"en": ["en1 en2 en3", "en7 en7 en0 en4"], "de": ["de5 de1 de2"]}
    try:
        assert served.info.directions == ("en-de", "en-fr", "de-en")
        with TestClient(create_app([served], Limits(16, 200, 8), None)) as client:
            assert client.get("/languages").json() == [
                {"code": "en", "name": "English", "targets": ["de", "fr"]},
                {"code": "de", "name": "German", "targets": ["en", "fr"]},
                {"code": "fr", "name": "French", "targets": []},
            ]
            for source, target in (("en", "de"), ("en", "fr"), ("de", "en")):
                expected = cli(tmp_path, lines[source], run=run, beam=2, src_lang=source, tgt_lang=target)
                assert [t[:2] for t in " ".join(expected).split()].count(target) >= len(
                    " ".join(expected).split()
                ) * 0.9
                answer = client.post("/translate", json={"q": lines[source], "source": source, "target": target})
                assert answer.status_code == 200 and answer.json()["translatedText"] == expected, (source, target)
                native = client.post("/v1/translate", json={"q": lines[source], "source": source, "target": target})
                assert native.json()["translatedText"] == expected
            # de -> fr: through English, each step with its own tag.
            english = cli(tmp_path, lines["de"], run=run, beam=2, src_lang="de", tgt_lang="en")
            french = cli(tmp_path, english, run=run, beam=2, src_lang="en", tgt_lang="fr")
            pivot = client.post("/translate", json={"q": lines["de"], "source": "de", "target": "fr"})
            assert pivot.json()["translatedText"] == french
            attention = client.post("/v1/attention", json={"q": lines["en"][0], "source": "en", "target": "fr"})
            assert attention.json()["source"][0] == ">>fr<<"  # what the model read, its tag first
            missing = client.post("/translate", json={"q": "en1", "source": "en"})
            assert missing.status_code == 400
            assert missing.json()["error"] == (
                "Invalid request: missing target parameter; this server translates en -> de, en -> fr, de -> en"
            )
    finally:
        served.batcher.stop()


def test_the_readme_serve_example_runs_as_printed(run_dir: Path, tmp_path: Path) -> None:
    """README.md's serve block, as a user types it: the server command (its run the demo's, here a tiny
    model of the same built-in task, on a free port) and the curl request, sent as curl sends it. It
    asked the demo run for en -> de, which it does not translate ("this server translates src -> tgt")."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (block,) = re.findall(r"<!-- serve example -->\n```bash\n(.*?)```", readme, re.DOTALL)
    serve_line, curl_line, shown = block.strip().splitlines()
    serve = shlex.split(serve_line, comments=True)
    assert f"seq2seq-translate run={DEMO_RUN} " in readme.split("<!-- serve example -->")[0], "the demo's run"
    assert serve[0] == "seq2seq-serve" and serve[1] == f"run={DEMO_RUN}"
    curl = shlex.split(curl_line)
    assert curl[:2] == ["curl", "-s"] and curl[3] == "-H" and curl[5] == "-d"
    address, header, body = curl[2], curl[4], curl[6]
    port = re.fullmatch(r"localhost:(\d+)/translate", address).group(1)
    assert serve[2:] == [f"port={port}"], "the request goes where the server listens"
    running = started(f"run={run_dir}")  # the README's arguments, its run and port made this test's
    try:
        name, value = (part.strip() for part in header.split(":", 1))
        answer = running.http.post(running.url + "/translate", content=body.encode(), headers={name: value})
    finally:
        assert running.stop() == 0
    assert answer.status_code == 200, answer.text
    expected = json.loads(shown)  # what the README shows the demo run answer: its keys and their types
    assert {key: type(value) for key, value in answer.json().items()} == {k: type(v) for k, v in expected.items()}
    request = json.loads(body)
    assert (request["source"], request["target"]) == (DataConfig.src_lang, DataConfig.tgt_lang)
    assert set(request["q"].split()) <= set(string.ascii_lowercase[: DataConfig.task_alphabet])
