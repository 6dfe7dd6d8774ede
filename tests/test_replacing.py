"""seq2seq/artifacts/replacing.py: the rule every writer follows before replacing a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lock_holder import hold_lock_in_another_process

from seq2seq.artifacts.replacing import (
    check_replaceable,
    enclosing_run,
    made_by,
    output_lock,
    record,
    writing_file,
)
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


def test_the_new_content_is_a_new_file_so_a_hard_link_keeps_the_old(tmp_path):
    path, link = tmp_path / "o.txt", tmp_path / "keep.txt"
    with writing_file(path, "output", "cmd", replace=False) as new:
        new.write_text("first\n")
    os.link(path, link)
    with writing_file(path, "output", "cmd", replace=False) as new:  # its own output: replaced
        assert new.parent == tmp_path and new != path
        new.write_text("second\n")
    assert (path.read_text(), link.read_text()) == ("second\n", "first\n")
    assert made_by(path, "cmd") and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "o.txt"]


def test_a_writer_that_fails_leaves_the_old_file_and_nothing_beside_it(tmp_path):
    path = tmp_path / "o.txt"
    with writing_file(path, "output", "cmd", replace=False) as new:
        new.write_text("first\n")
    with pytest.raises(KeyboardInterrupt), writing_file(path, "output", "cmd", replace=False) as new:
        new.write_text("half of the second\n")
        raise KeyboardInterrupt
    assert path.read_text() == "first\n" and [p.name for p in tmp_path.iterdir()] == ["o.txt"]
    assert made_by(path, "cmd")


def test_a_symlinks_target_is_replaced_and_keeps_its_mode(tmp_path):
    target, link = tmp_path / "real.txt", tmp_path / "link.txt"
    target.write_text("x")
    target.chmod(0o640)
    link.symlink_to(target)
    with writing_file(link, "output", "cmd", replace=True) as new:
        new.write_text("new\n")
    assert link.is_symlink() and target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640


def test_what_a_killed_writer_left_goes_and_a_users_file_of_that_name_stays(tmp_path):
    path = tmp_path / "o.txt"
    left = tmp_path / ".o.txt.k1ll3d.tmp"  # a writer's new file, as SIGKILL leaves it
    left.write_text("half a translation")
    record(left, "cmd", complete=False)  # what writing_file notes as it makes one
    users = tmp_path / ".o.txt.mine.tmp"
    users.write_text("the user's")
    with writing_file(path, "output", "cmd", replace=False) as new:
        new.write_text("done\n")
    assert not left.exists() and users.read_text() == "the user's" and path.read_text() == "done\n"


def test_a_second_writer_of_one_file_is_refused_and_the_first_ones_result_stays(tmp_path):
    path = tmp_path / "o.txt"
    with writing_file(path, "output", "cmd", replace=False) as new:
        new.write_text("the first writer's 200 lines\n")
    holder = hold_lock_in_another_process(path)
    try:
        with pytest.raises(UserError) as info, writing_file(path, "output", "cmd", replace=False) as new:
            new.write_text("3 lines\n")
        assert str(info.value) == (
            f"output={path}: another process (seq2seq-translate, process {holder.pid}) is writing this file; "
            "wait for it to end, or give output= another file"
        )
    finally:
        holder.communicate("")
    assert path.read_text() == "the first writer's 200 lines\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.txt"]  # the holder's lock file went with it
    with writing_file(path, "output", "cmd", replace=False) as new:  # free again
        new.write_text("3 lines\n")


def test_devices_and_pipes_are_written_as_they_are_and_not_locked(tmp_path):
    with writing_file(Path("/dev/null"), "output", "cmd", replace=False) as new:
        assert new == Path("/dev/null")
    with output_lock(Path("/dev/null"), "output", "cmd"), output_lock(Path("/dev/null"), "output", "cmd"):
        pass


def test_dev_stdout_onto_a_pipe_is_written_to_as_it_is(tmp_path):
    # realpath("/dev/stdout") names no file when stdout is a pipe ("/proc/N/fd/pipe:[M]"): no lock beside it.
    import subprocess
    import sys

    code = (
        "from pathlib import Path; from seq2seq.artifacts.replacing import writing_file\n"
        "with writing_file(Path('/dev/stdout'), 'output', 'cmd', replace=False) as path:\n"
        "    open(path, 'w').write('through the pipe\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "through the pipe\n", "")


def test_a_second_writer_of_one_folder_is_told_it_is_a_folder(tmp_path):
    folder = tmp_path / "plots"
    holder = hold_lock_in_another_process(folder)
    try:
        with pytest.raises(UserError) as info, output_lock(folder, "attention", "cmd", folder=True):
            pass
        assert str(info.value) == (
            f"attention={folder}: another process (seq2seq-translate, process {holder.pid}) is writing this "
            "folder; wait for it to end, or give attention= another folder"
        )
    finally:
        holder.communicate("")
