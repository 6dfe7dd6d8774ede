"""Throughput and latency of `seq2seq-serve` under concurrent clients, beside `seq2seq-translate` on
the same file; prints one JSON object.

    python scripts/bench_serve.py --run outputs/reproduce/multi30k_en_de \
        --input data/multi30k/test_2016_flickr.en.gz --beam 5 --threads 2

For each engine (PyTorch and the run's CTranslate2 export): the server is started on loopback
(port 0), then 1, 8, 32 and 128 clients each send one line of the input at a time (LibreTranslate's
POST /translate, keep-alive connections), until every line has been sent once; lines/s and the
p50/p95/p99 of the request latency per concurrency. Beside them, with the same model, beam, engine and
threads: `seq2seq-translate` on the whole file (the lines/s it logs, which leaves out its start-up,
as the server's figures do) and its engine's time for one line alone (the median over the lines the
one-client row sent, in this process, after the server has stopped). Run it on an idle machine: the
clients share it.

With --second-run (and --second-input in its source language) one more server holds both models and
32 clients send the two inputs' lines interleaved, each to its model by source/target; its lines/s is
set beside both CLI runs' combined rate (all lines over the sum of their decoding times). --html-paragraphs
N posts one page of N paragraphs (three input lines each) with format=html; --docx-lines N uploads a
.docx of N paragraphs to /translate_file and downloads the result. Both are timed whole (median of
--repeats) and set beside the CLI's rate on the same sentences.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

SERVING = re.compile(r" on (http://[\d.]+:\d+)$")
CLI_RATE = re.compile(r"translated (\d+) lines in [\d.]+ s \(([\d.]+) lines/s\)")


def read_input(path: str, limit: int | None) -> list[str]:
    if not Path(path).is_file():
        sys.exit(f"{path}: no such file (--input)")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        text = [line.rstrip("\n") for line in lines]
    return text[:limit] if limit else text


class Server:
    def __init__(self, arguments: list[str]) -> None:
        command = [sys.executable, "-m", "seq2seq.cli.serve", "port=0", *arguments]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 300
        while not (found := [m for line in list(self.log) if (m := SERVING.search(line))]):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                sys.exit("the server did not start:\n" + "\n".join(self.log[-20:]))
            time.sleep(0.05)
        self.url = found[0].group(1)

    def _read(self) -> None:
        for line in self.process.stderr:
            self.log.append(line.rstrip("\n"))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


async def clients(url: str, lines: list[str], count: int, source: str, target: str) -> dict:
    """`count` clients, each sending the next unsent line and waiting for its answer, until none is left.
    aiohttp, not httpx: with 128 connections httpx's pool, not the server, was what limited the rate."""
    import aiohttp

    todo = iter(range(len(lines)))
    latencies: list[float] = []
    translations: list[str | None] = [None] * len(lines)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=count)) as http:

        async def client() -> None:
            for index in todo:
                start = time.perf_counter()
                body = {"q": lines[index], "source": source, "target": target}
                async with http.post(url + "/translate", json=body) as answer:
                    answer.raise_for_status()
                    translations[index] = (await answer.json())["translatedText"]
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(count)))
        seconds = time.perf_counter() - start
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "clients": count,
        "lines": len(lines),
        "seconds": round(seconds, 3),
        "lines_per_s": round(len(lines) / seconds, 2),
        "p50_ms": round(1000 * quantiles[49], 2),
        "p95_ms": round(1000 * quantiles[94], 2),
        "p99_ms": round(1000 * quantiles[98], 2),
        "translations": translations,
    }


def cli_rate(args: argparse.Namespace, engine: str, lines: list[str]) -> tuple[dict, list[str]]:
    """seq2seq-translate on the whole file: the lines/s it logs (decoding, without start-up), and its lines."""
    with tempfile.TemporaryDirectory() as directory:
        source, output = Path(directory) / "input.txt", Path(directory) / "output.txt"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        beside = Path(sys.executable).with_name("seq2seq-translate")  # this environment's, PATH or not
        program = str(beside) if beside.is_file() else "seq2seq-translate"
        command = [program, *settings(args, engine), f"input={source}", f"output={output}"]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode:
            sys.exit(f"seq2seq-translate failed:\n{done.stderr[-2000:]}")
        rate = CLI_RATE.search(done.stderr)
        return {"lines_per_s": float(rate.group(2)), "wall_seconds_with_start_up": round(wall, 2)}, output.read_text(
            encoding="utf-8"
        ).split("\n")[:-1]


def one_line_ms(args: argparse.Namespace, engine: str, lines: list[str]) -> float:
    """The engine seq2seq-translate loads, timed on one line at a time (median), in this process."""
    from omegaconf import OmegaConf

    from seq2seq.config import TranslateConfig
    from seq2seq.inference.job import decoding_job
    from seq2seq.inference.loading import load_engine

    values = dict(item.split("=", 1) for item in settings(args, engine))
    cfg = OmegaConf.merge(OmegaConf.structured(TranslateConfig), values)
    translator = load_engine(decoding_job(cfg))
    translator.translate(lines[:2])  # warm up
    times = []
    for line in lines[: args.single or None]:
        start = time.perf_counter()
        translator.translate([line])
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 3)


def settings(args: argparse.Namespace, engine: str) -> list[str]:
    common = [f"run={args.run}", f"beam={args.beam}", f"engine={engine}", f"precision={args.precision}"]
    return common + ([f"threads={args.threads}"] if args.threads else [])


def run_pair(run: str) -> tuple[str, str]:
    """The source and target language a run was trained for (its saved Hydra config)."""
    from omegaconf import OmegaConf

    data = OmegaConf.load(Path(run) / ".hydra" / "config.yaml").data
    return data.src_lang, data.tgt_lang


async def two_models(url: str, jobs: list[tuple[str, str, str]], count: int) -> dict:
    """`count` clients sending (line, source, target) jobs, the two models' lines interleaved."""
    import aiohttp

    todo = iter(range(len(jobs)))
    translations: list[str | None] = [None] * len(jobs)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=count)) as http:

        async def client() -> None:
            for index in todo:
                line, source, target = jobs[index]
                async with http.post(
                    url + "/translate", json={"q": line, "source": source, "target": target}
                ) as answer:
                    answer.raise_for_status()
                    translations[index] = (await answer.json())["translatedText"]

        start = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(count)))
        seconds = time.perf_counter() - start
    return {"clients": count, "lines": len(jobs), "seconds": round(seconds, 3), "translations": translations}


def html_page(lines: list[str], paragraphs: int) -> tuple[str, int]:
    """A page of `paragraphs` paragraphs, three input lines (sentences) each: the page and its sentence count."""
    import html

    sentences = [line.strip().rstrip(".") + "." for line in lines[: 3 * paragraphs]]
    body = "\n".join(
        f'<p class="p{i}">{html.escape(" ".join(sentences[3 * i : 3 * i + 3]))}</p>' for i in range(paragraphs)
    )
    return f"<!DOCTYPE html>\n<html><head><title>bench</title></head><body>\n{body}\n</body></html>\n", len(sentences)


def docx_bytes(lines: list[str]) -> bytes:
    import io

    import docx

    document = docx.Document()
    for line in lines:
        document.add_paragraph(line)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def timed(repeats: int, work) -> float:  # noqa: ANN001  (a callable of no arguments)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def documents(args: argparse.Namespace, url: str, lines: list[str], source: str, target: str, cli: dict) -> dict:
    """The HTML page and the .docx rows: whole-request seconds, sentences/s and the ratio to the CLI's lines/s."""
    rows: dict = {}
    with httpx.Client(timeout=600) as http:
        if args.html_paragraphs:
            page, sentences = html_page(lines, args.html_paragraphs)

            def post_page() -> None:
                answer = http.post(
                    url + "/translate", json={"q": page, "source": source, "target": target, "format": "html"}
                )
                answer.raise_for_status()
                if answer.json()["translatedText"].count("<p ") != args.html_paragraphs:
                    sys.exit("the translated page lost paragraphs")

            seconds = timed(args.repeats, post_page)
            rows["html_page"] = {
                "paragraphs": args.html_paragraphs,
                "sentences": sentences,
                "bytes": len(page.encode()),
                "seconds": round(seconds, 3),
                "sentences_per_s": round(sentences / seconds, 2),
                "vs_cli_lines_per_s": round(sentences / seconds / cli["lines_per_s"], 3),
            }
        if args.docx_lines:
            data = docx_bytes(lines[: args.docx_lines])

            def post_file() -> None:
                files = {"file": ("bench.docx", data, "application/octet-stream")}
                answer = http.post(url + "/translate_file", data={"source": source, "target": target}, files=files)
                answer.raise_for_status()
                download = http.get(answer.json()["translatedFileUrl"])
                download.raise_for_status()

            seconds = timed(args.repeats, post_file)
            count = min(args.docx_lines, len(lines))
            rows["docx"] = {
                "lines": count,
                "bytes": len(data),
                "seconds": round(seconds, 3),
                "lines_per_s": round(count / seconds, 2),
                "vs_cli_lines_per_s": round(count / seconds / cli["lines_per_s"], 3),
            }
    return rows


def two_model_row(args: argparse.Namespace, engine: str, lines: list[str], cli: dict, cli_lines: list[str]) -> dict:
    """One server holding --run and --second-run; 32 clients, the two inputs interleaved."""
    second = read_input(args.second_input, args.lines)
    first_pair, second_pair = run_pair(args.run), run_pair(args.second_run)
    second_args = argparse.Namespace(**{**vars(args), "run": args.second_run})
    second_cli, second_cli_lines = cli_rate(second_args, engine, second)
    jobs = [(line, *first_pair) for line in lines] + [(line, *second_pair) for line in second]
    expected = cli_lines + second_cli_lines
    order = sorted(range(len(jobs)), key=lambda i: (i if i < len(lines) else i - len(lines), i >= len(lines)))
    server = Server([*settings(args, engine), f"runs=[{args.second_run}]", *args.server_args.split()])
    try:
        row = asyncio.run(two_models(server.url, [jobs[i] for i in order], args.two_model_clients))
    finally:
        server.stop()
    translations = row.pop("translations")
    row["same_lines_as_cli"] = sum(translations[k] == expected[i] for k, i in enumerate(order))
    row["lines_per_s"] = round(len(jobs) / row["seconds"], 2)
    combined = len(jobs) / (len(lines) / cli["lines_per_s"] + len(second) / second_cli["lines_per_s"])
    row["cli_combined_lines_per_s"] = round(combined, 2)
    row["vs_cli_lines_per_s"] = round(row["lines_per_s"] / combined, 3)
    row["second_cli"] = second_cli
    row["pairs"] = ["-".join(first_pair), "-".join(second_pair)]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run directory with its ctranslate2/ export")
    parser.add_argument("--input", default="data/multi30k/test_2016_flickr.en.gz")
    parser.add_argument("--lines", type=int, default=None, help="only the first N lines of the input")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="the engine's threads (null: its default)")
    parser.add_argument("--precision", default="fp32", help="fp32: both engines decode alike")
    parser.add_argument("--engines", default="torch,ctranslate2")
    parser.add_argument("--clients", default="1,8,32,128")
    parser.add_argument("--single", type=int, default=0, help="lines timed alone for the one-line figure (0: all)")
    parser.add_argument("--server-args", default="", help="more key=value settings for seq2seq-serve")
    parser.add_argument("--second-run", default=None, help="a second model: the two-model row")
    parser.add_argument("--second-input", default=None, help="lines in the second model's source language")
    parser.add_argument("--two-model-clients", type=int, default=32)
    parser.add_argument("--html-paragraphs", type=int, default=0, help="one HTML page of N paragraphs (0: none)")
    parser.add_argument("--docx-lines", type=int, default=0, help="one .docx of N lines through /translate_file")
    parser.add_argument("--repeats", type=int, default=3, help="page and file timings: median of this many")
    args = parser.parse_args()
    if bool(args.second_run) != bool(args.second_input):
        sys.exit("--second-run and --second-input go together")
    try:
        import aiohttp  # noqa: F401  (the load generator)
    except ImportError:
        sys.exit("bench_serve.py needs aiohttp: pip install aiohttp")
    lines = read_input(args.input, args.lines)
    result: dict = {
        "machine": machine_info(),
        "loadavg_at_start": os.getloadavg(),
        "input": args.input,
        "lines": len(lines),
        "beam": args.beam,
        "threads": args.threads,
        "precision": args.precision,
        "engines": {},
    }
    for engine in args.engines.split(","):
        cli, cli_lines = cli_rate(args, engine, lines)
        server = Server([*settings(args, engine), *args.server_args.split()])
        health = httpx.get(server.url + "/v1/info").json()  # the model, its engine and languages
        rows = []
        try:
            for count in [int(c) for c in args.clients.split(",")]:
                row = asyncio.run(clients(server.url, lines, count, health["source"], health["target"]))
                row["same_lines_as_cli"] = sum(a == b for a, b in zip(row.pop("translations"), cli_lines, strict=True))
                row["vs_cli_lines_per_s"] = round(row["lines_per_s"] / cli["lines_per_s"], 3)
                rows.append(row)
            extra = documents(args, server.url, lines, health["source"], health["target"], cli)
        finally:
            server.stop()
        cli["one_line_ms"] = one_line_ms(args, engine, lines)
        alone = next((row for row in rows if row["clients"] == 1), None)
        if alone is not None and not args.single:  # the same lines: the target is <= 1.2x + 5 ms
            alone["p50_vs_cli_one_line"] = round(alone["p50_ms"] / cli["one_line_ms"], 3)
        # what the server's SharingWatch did, if anything: the clients' process is other work to it
        watch = [line.split(" - ", 1)[-1] for line in server.log if " - cpu: " in line]
        result["engines"][engine] = {
            "engine": health["engine"],
            "cli": cli,
            "server": rows,
            **extra,
            "server_cpu_log": watch,
        }
        if args.second_run:
            result["engines"][engine]["two_models"] = two_model_row(args, engine, lines, cli, cli_lines)
    result["loadavg_at_end"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
