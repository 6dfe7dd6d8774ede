"""seq2seq/artifacts/replacing.py: the rule every writer follows before replacing a file."""

from __future__ import annotations

import os

import pytest

from seq2seq.artifacts.replacing import check_replaceable, enclosing_run, made_by, record
from seq2seq.artifacts.run_dir import MARKER_TEXT, RUN_MARKER
from seq2seq.config import UserError


def test_a_new_path_and_a_replace_flag_pass_and_a_users_file_does_not(tmp_path):
    check_replaceable(tmp_path / "new.txt", "output", "cmd", replace=False)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    check_replaceable(mine, "output", "cmd", replace=True)
    with pytest.raises(UserError, match=r"^output=.*mine.txt: already exists and is a file cmd did not write; "):
        check_replaceable(mine, "output", "cmd", replace=False)


def test_a_file_is_the_commands_own_until_it_changes(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("first\n")
    record(path, "cmd")
    assert made_by(path, "cmd") and not made_by(path, "other-cmd")
    check_replaceable(path, "output", "cmd", replace=False)
    path.write_text("edited by hand, longer\n")
    assert not made_by(path, "cmd")
    os.replace(tmp_path / "out.txt", tmp_path / "moved.txt")
    (tmp_path / "out.txt").write_text("first\n")  # same name and text, another file
    assert not made_by(tmp_path / "out.txt", "cmd")


def test_a_file_left_half_written_stays_the_commands_own(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("")
    record(path, "cmd", complete=False)  # the process is killed before it records the end
    with open(path, "a") as handle:
        handle.write("line 1\nline 2\n")
    assert made_by(path, "cmd")


def test_a_file_inside_a_run_is_named_as_the_runs(tmp_path):
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / RUN_MARKER).write_text(MARKER_TEXT)
    weights = tmp_path / "run" / "model" / "model.safetensors"
    weights.write_bytes(b"w")
    assert enclosing_run(weights) == tmp_path / "run"
    with pytest.raises(UserError, match=f"is a file of the run {tmp_path / 'run'}; "):
        check_replaceable(weights, "output", "cmd", replace=False)


def test_devices_and_pipes_are_written_to_and_directories_refused(tmp_path):
    check_replaceable(tmp_path.joinpath("nothing", "below"), "output", "cmd", replace=False)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    check_replaceable(fifo, "output", "cmd", replace=False)
    check_replaceable(type(tmp_path)("/dev/null"), "output", "cmd", replace=False)
    with pytest.raises(UserError, match="is a directory; give output= a file$"):
        check_replaceable(tmp_path, "output", "cmd", replace=True)


def test_an_unwritable_ledger_costs_only_a_later_refusal(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache directory should be")
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "out.txt"
    path.write_text("x")
    record(path, "cmd")  # no exception
    assert not made_by(path, "cmd")
