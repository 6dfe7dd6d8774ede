"""The lines every way into decoding writes, on one fixed tiny model: seq2seq-translate (its console
script's `main`), the Python API (`seq2seq.inference.load`, `Translator.load`) and seq2seq-serve (a
real server: /translate and /v1/translate), for greedy and beam search, n-best lists, sampling with a
seed and forced prefixes. Each is held to the engine built by hand, below every config and plan
(`Translator(...)` on `torch_model.load_model`, `CTranslate2Translator(...)` on the run's export, given
`DecodingSettings` and `EngineOptions` directly): what a command or the API builds of its settings
must reach the engine unchanged, whichever way it travels."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config, train_logging

TRAIN = [*TINY_TRAIN, "max_steps=24", "valid_every=24", "save_every=24", "optim.lr=3e-3", "optim.warmup=8"]
SETTINGS = {"precision": "fp32", "device": "cpu", "threads": 1}
LINES = ["a b c d", "e f g", "h i j k l", "m n", "b a", "q r s t a b", "c c c"]
PREFIXES = ["D", "", "Q R", "", "a", "", "c"]
# (the settings, the engine engine=auto decodes them with): what seq2seq-translate would pick.
CASES = [
    ({"beam": 1}, "ctranslate2"),
    ({"beam": 3, "length_penalty": 0.6}, "ctranslate2"),
    ({"beam": 3, "nbest": 2}, "torch"),
    ({"sampling": True, "nbest": 2, "seed": 7, "top_k": 5}, "torch"),
    ({"beam": 2, "prefix": True}, "torch"),
    ({"beam": 2, "engine": "torch"}, "torch"),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("entry-points")
    train_logging(compose_config("train", [*TRAIN, f"data.cache_dir={root / 'cache'}"]), root / "run")
    if not (root / "run" / "ctranslate2" / "model.bin").is_file():
        pytest.skip("needs the CTranslate2 export training writes with `pip install seq2seq[export]`")
    return root / "run"


def by_hand(run_dir: Path, engine: str, settings: dict) -> list[list[tuple[str, float]]]:
    """(text, score) of each line's hypotheses from the engine constructed directly."""
    import torch

    from seq2seq.inference.ctranslate2_engine import CTranslate2Translator
    from seq2seq.inference.settings import DecodingSettings, EngineOptions
    from seq2seq.inference.target_language import ModelLanguages
    from seq2seq.inference.torch_model import load_model
    from seq2seq.inference.translator import Translator

    decoding = DecodingSettings(**{key: value for key, value in settings.items() if key != "engine"})
    if engine == "ctranslate2":
        translator = CTranslate2Translator(run_dir / "ctranslate2", decoding, EngineOptions(**SETTINGS))
    else:
        torch.set_num_threads(1)
        model, tokenizers, data = load_model(str(run_dir), None, "fp32", torch.device("cpu"), decoding.beam)
        translator = Translator(model, tokenizers, torch.device("cpu"), decoding, ModelLanguages.of(data, tokenizers))
    prefixes = PREFIXES if decoding.prefix else None
    return [[(t.text, t.score) for t in nbest] for nbest in translator.translate_nbest(LINES, prefixes)]


def written(hypotheses: list[list[tuple[str, float]]], nbest: int) -> list[str]:
    """seq2seq-translate's output lines: the best translation, or "line ||| translation ||| score"."""
    if nbest == 1:
        return [hyps[0][0] for hyps in hypotheses]
    return [f"{i} ||| {text} ||| {score:.4f}" for i, hyps in enumerate(hypotheses) for text, score in hyps]


def source_text(prefix: bool) -> str:
    pairs = zip(LINES, PREFIXES, strict=True)
    return "".join(f"{line}\t{given}\n" if prefix else f"{line}\n" for line, given in pairs)


@pytest.mark.parametrize(("settings", "engine"), CASES, ids=[json.dumps(case) for case, _ in CASES])
def test_seq2seq_translate_and_the_api_write_the_engines_lines(run_dir, tmp_path, run_main, settings, engine) -> None:
    from seq2seq.inference import Translator, load

    expected = by_hand(run_dir, engine, settings)
    nbest = settings.get("nbest", 1)
    (tmp_path / "in.txt").write_text(source_text(settings.get("prefix", False)))
    args = [f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in settings.items()]
    args += [f"{key}={value}" for key, value in SETTINGS.items()]
    result = run_main(["seq2seq-translate", f"run={run_dir}", "input=in.txt", "output=out.txt", *args], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.txt").read_text().split("\n")[:-1] == written(expected, nbest)

    api = {key: value for key, value in {**settings, **SETTINGS}.items() if key != "prefix"}
    if settings.get("sampling"):
        from seq2seq.inference import SamplingRule

        api["sampling"] = SamplingRule(top_k=settings["top_k"])
        api.pop("top_k")
    prefixes = PREFIXES if settings.get("prefix") else None
    loaded = load(run_dir, **api)
    # The API has no prefix setting (prefixes come with the lines): it picks its engine without it.
    api_engine = "ctranslate2" if prefixes is not None and "engine" not in settings else engine
    assert loaded.kind == api_engine
    got = [[(t.text, t.score) for t in hyps] for hyps in loaded.translate_nbest(LINES, prefixes)]
    assert written(got, nbest) == written(by_hand(run_dir, api_engine, settings), nbest)
    if engine == "torch":
        forced = Translator.load(run_dir, **{key: value for key, value in api.items() if key != "engine"})
        got = [[(t.text, t.score) for t in hyps] for hyps in forced.translate_nbest(LINES, prefixes)]
        assert written(got, nbest) == written(expected, nbest)


class Server:
    """`python -m seq2seq.cli.serve ...` in a subprocess, until it logs where it listens."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "seq2seq.cli.serve", "port=0", *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while not any(found := [re.search(r" on (http://[\d.]+:\d+)$", line) for line in list(self.log)]):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError("the server did not start:\n" + "\n".join(self.log))
            time.sleep(0.05)
        self.url = next(match for match in found if match).group(1)

    def _read(self) -> None:
        for line in self.process.stderr:
            self.log.append(line.rstrip("\n"))

    def post(self, path: str, body: dict) -> dict:
        import httpx

        headers = {"content-type": "application/json"}
        answer = httpx.post(self.url + path, content=json.dumps(body), headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)


def test_seq2seq_serve_answers_the_engines_lines(run_dir: Path) -> None:
    """One server (engine=auto, beam=3 of its own): /translate decodes with its settings, /v1/translate
    with each case's over them, PyTorch loaded where the case needs it."""
    pytest.importorskip("uvicorn", reason="seq2seq-serve needs: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="the dev extra installs httpx")
    server = Server(f"run={run_dir}", "beam=3", "length_penalty=0.6", *(f"{k}={v}" for k, v in SETTINGS.items()))
    try:
        import httpx

        info = httpx.get(server.url + "/v1/info", timeout=30).json()
        own = server.post("/translate", {"q": LINES, "source": info["source"], "target": info["target"]})
        own = own["translatedText"]
        assert own == written(by_hand(run_dir, "ctranslate2", {"beam": 3, "length_penalty": 0.6}), 1)
        for settings, engine in CASES:
            if "engine" in settings:
                continue  # the server's engine is its own setting, not a request's
            body = {"q": LINES, "length_penalty": 0.6, **settings}
            if body.pop("prefix", False):
                body["prefix"] = PREFIXES
            expected = by_hand(run_dir, engine, {"length_penalty": 0.6, **settings})
            answer = server.post("/v1/translate", body)
            got = [[(hyp["text"], hyp["score"]) for hyp in hyps] for hyps in answer["nbest"]]
            assert written(got, settings.get("nbest", 1)) == written(expected, settings.get("nbest", 1)), settings
    finally:
        assert server.stop() == 0, "\n".join(server.log)
