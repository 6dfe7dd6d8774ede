"""scripts/bench_first_update.py: the mix it writes is the one it says, its override composes into a
valid config, and (slow, with Multi30k) a small run of it reports a first update."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MULTI30K, MULTI30K_MISSING, compose_config
from script_module import SCRIPTS, load_script

from seq2seq.config import validate_train

SOURCES = [f"a dog number {i} runs" for i in range(49)] + ["a dog\twith a tab"]  # Multi30k has such captions
TARGETS = [f"ein Hund Nummer {i} rennt" for i in range(50)]


def test_the_mix_has_its_shares_files_and_weights(tmp_path: Path) -> None:
    bench = load_script("bench_first_update")
    corpora = bench.write_mix(SOURCES, TARGETS, 1001, tmp_path, seed=0)
    assert [(c["name"], c["pairs"], c["weight"]) for c in corpora] == [
        ("crawl", 801, 1.0),  # 80%, with the rounding's remainder
        ("clean", 100, 3.0),
        ("memory", 100, 2.0),
    ]
    for corpus in corpora:  # each file holds the pairs it says, joined from the given ones, both sides alike
        if corpus["kind"] == "tsv":
            rows = [line.split("\t") for line in Path(corpus["train"]).read_text().splitlines()]
        else:
            sides = (Path(corpus[key]).read_text().splitlines() for key in ("train_src", "train_tgt"))
            rows = [list(row) for row in zip(*sides, strict=True)]
        assert len(rows) == corpus["pairs"] and all(len(row) == 2 for row in rows)
        for src, tgt in rows:
            assert src.count("dog") == tgt.count("Hund") in (1, 2, 3)
    crawl, clean = (Path(c["train_src"]).read_text() for c in corpora[:2])
    assert crawl.splitlines()[:100] != clean.splitlines()  # a seed a corpus


def test_the_override_composes_into_a_valid_config(tmp_path: Path) -> None:
    bench = load_script("bench_first_update")
    corpora = bench.write_mix(SOURCES, TARGETS, 200, tmp_path, seed=0)
    overrides = [
        "data=multi30k",
        f"data.dir={tmp_path}",
        bench.corpora_override(corpora, "[length,duplicate]"),
        "data.streaming=true",
    ]
    cfg = compose_config("train", overrides)
    validate_train(cfg)
    composed = cfg.data.corpora
    assert [(c.name, c.kind, c.weight) for c in composed] == [(c["name"], c["kind"], c["weight"]) for c in corpora]
    assert list(composed[0].clean) == ["length", "duplicate"] and composed[1].clean is None
    assert composed[2].train == corpora[2]["train"] and composed[0].train_src == corpora[0]["train_src"]


@pytest.mark.slow
def test_a_small_run_reports_its_first_update(tmp_path: Path) -> None:
    if MULTI30K is None:
        pytest.skip(MULTI30K_MISSING)
    out = tmp_path / "bench.json"
    command = [sys.executable, str(SCRIPTS / "bench_first_update.py"), "--data-dir", str(MULTI30K), "--pairs", "3000"]
    command += [
        "--model",
        "tiny",
        "--crawl-clean",
        "[length,duplicate]",
        "--json",
        str(out),
        "--workdir",
        str(tmp_path),
    ]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=600)
    result = json.loads(out.read_text())
    (size,) = result["sizes"]
    assert size["pairs"] == sum(c["pairs"] for c in size["mix"]) == 3000
    assert [start["cache"] for start in size["starts"]] == ["cold", "warm"]
    for start in size["starts"]:
        assert start["seconds_to_first_update"] > 0 and start["peak_vmhwm_mb"] > 0
        assert start["peak_vmhwm_mb"] >= start["peak_rssanon_mb"]
