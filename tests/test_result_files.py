"""The result files under results/ are read by people on other machines: each is valid JSON and names
no folder of the machine it was taken on (a command reads as a checkout runs it: data/, runs/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parent.parent / "results"
# Where this project's machines keep checkouts, data and caches; a bench's own temporary folder
# (/tmp/bench_...) says only where that script wrote, and is left as it printed it.
MACHINE_FOLDER = re.compile(r"(?<![\w.~])/(work|root|home|Users)/")


@pytest.mark.parametrize("path", sorted(RESULTS.rglob("*.json")), ids=lambda p: str(p.relative_to(RESULTS)))
def test_a_result_file_parses_and_names_no_machine_folder(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    json.loads(text)
    found = [match.group(0) for match in MACHINE_FOLDER.finditer(text)]
    assert not found, f"{path.name}: names {found[0]}... (write it as a checkout would: data/, runs/, ~/.cache/)"


def test_the_pattern_finds_a_machine_folder_and_leaves_relative_ones() -> None:
    assert MACHINE_FOLDER.search('"cd /work/scratch/bt"')
    assert MACHINE_FOLDER.search('"/root/.cache/seq2seq"')
    assert not MACHINE_FOLDER.search('"runs/work/x" "~/.cache/seq2seq" "data/multi30k"')
