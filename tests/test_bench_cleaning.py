"""scripts/bench_cleaning.py --smoke: it runs, and its counts are the corpus's, counted here."""

from __future__ import annotations

import json
import subprocess
import sys

from script_module import SCRIPTS, load_script

from seq2seq.config import CLEAN_RULES, DEFAULT_CLEAN_RULES, HARD_CLEAN_RULES


def test_smoke_reports_every_rule_and_the_counts_of_the_corpus(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_cleaning.py"), "--smoke", "--json", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.read_text())
    assert json.loads(done.stdout) == result  # printed and written alike (machine.write_json_report)
    # The corpus the smoke run cleaned, made again here: 60 clean pairs and a third as many noisy ones.
    en, de, fr = load_script("bench_cleaning").smoke_corpus()
    pairs, _ = load_script("make_noisy_multi30k").make(en, de, fr, share=1 / 3, seed=0)
    assert result["corpus"]["pairs"] == len(pairs) == 80
    assert list(result["per_rule"]) == list(CLEAN_RULES)
    assert all(row["lines_per_second"] > 0 for row in result["per_rule"].values())
    # Each rule alone sees every pair: exact repeats, and sides that are the same text, counted directly.
    assert result["per_rule"]["duplicate"]["dropped"] == len(pairs) - len(set(pairs))
    assert result["per_rule"]["identical"]["dropped"] == sum(src == tgt for src, tgt in pairs)
    together, hard = result["default"], result["hard"]
    assert together["rules"] == list(DEFAULT_CLEAN_RULES) and together["lines_per_second"] > 0
    assert hard["rules"] == list(HARD_CLEAN_RULES) and hard["lines_per_second"] > 0
    # Together a pair is dropped at most once, and by at least the rules that drop it alone.
    assert max(row["dropped"] for row in result["per_rule"].values()) <= together["dropped"] <= len(pairs)
    # 80 pairs are too few for the alignment rule's tables (100): it judges none, so default drops as hard
    assert result["per_rule"]["alignment"]["dropped"] == 0 and together["dropped"] == hard["dropped"]
    assert result["machine"]["cores"] >= 1 and result["smoke"] is True


def test_a_report_is_printed_and_written_as_the_same_json(tmp_path, capsys):
    result = {"name": "bench", "rows": [{"lines_per_second": 7392}], "note": "Grüße"}
    load_script("machine").write_json_report(result, tmp_path / "out.json")
    printed = capsys.readouterr().out
    assert json.loads(printed) == result and (tmp_path / "out.json").read_text() == printed
    load_script("machine").write_json_report(result, None)  # no --json: printed only
    assert json.loads(capsys.readouterr().out) == result
