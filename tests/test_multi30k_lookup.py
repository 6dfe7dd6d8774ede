"""Where the Multi30k tests find the corpus (tests/conftest.py, docs/contributing.md): the folder
SEQ2SEQ_TEST_MULTI30K names, else data/multi30k in the clone, then ../shared/data/multi30k."""

from __future__ import annotations

from pathlib import Path

from conftest import MULTI30K_SETTING, find_multi30k, multi30k_candidates
from script_module import load_script

NAMES = load_script("get_multi30k").file_names()


def corpus(folder: Path, names: list[str] = NAMES) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(b"")
    return folder


def test_the_clone_s_data_folder_comes_before_the_shared_one(tmp_path: Path) -> None:
    clone = tmp_path / "seq2seq"
    mine = corpus(clone / "data" / "multi30k")
    shared = corpus(tmp_path / "shared" / "data" / "multi30k")
    searched = multi30k_candidates({}, clone)
    assert searched[:2] == [mine, shared]
    assert find_multi30k(searched) == mine


def test_a_clone_deeper_down_finds_the_shared_folder_above_it(tmp_path: Path) -> None:
    # A clone made in a scratch folder (work/scratch/ci/) skipped every Multi30k test: only the
    # clone's own parent was looked beside.
    clone = tmp_path / "scratch" / "ci"
    shared = corpus(tmp_path / "shared" / "data" / "multi30k")
    searched = multi30k_candidates({}, clone)
    assert searched[1] == tmp_path / "scratch" / "shared" / "data" / "multi30k"  # the nearest first
    assert find_multi30k(searched) == shared


def test_the_shared_folder_is_read_where_the_clone_has_none_or_half_a_fetch(tmp_path: Path) -> None:
    clone = tmp_path / "seq2seq"
    shared = corpus(tmp_path / "shared" / "data" / "multi30k")
    assert find_multi30k(multi30k_candidates({}, clone)) == shared
    corpus(clone / "data" / "multi30k", NAMES[:3])  # what an interrupted fetch leaves
    assert find_multi30k(multi30k_candidates({}, clone)) == shared


def test_the_setting_names_the_only_folder_looked_in(tmp_path: Path, monkeypatch) -> None:
    clone = tmp_path / "seq2seq"
    corpus(clone / "data" / "multi30k")
    elsewhere = corpus(tmp_path / "corpora" / "m30k")
    monkeypatch.chdir(tmp_path)
    searched = multi30k_candidates({MULTI30K_SETTING: "corpora/m30k"}, clone)  # relative to where pytest runs
    assert searched == [elsewhere] and find_multi30k(searched) == elsewhere
    assert find_multi30k(multi30k_candidates({MULTI30K_SETTING: str(tmp_path / "none")}, clone)) is None
    assert multi30k_candidates({MULTI30K_SETTING: ""}, clone)[0] == clone / "data" / "multi30k"  # empty: unset
