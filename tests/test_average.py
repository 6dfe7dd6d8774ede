"""`seq2seq-average` (seq2seq/cli/average.py over seq2seq/averaging.py): the mean of the weights, and what
it says it averaged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2seq.artifacts.checkpoint import atomic_save, load_checkpoint
from seq2seq.cli.average import key_values, run
from seq2seq.cli.average import main as average_main
from seq2seq.config import UserError

BIN = Path(sys.executable).parent


def main(argv: list[str]) -> Path:
    """The command's work, with its key=value arguments parsed as the command parses them."""
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import AverageConfig

    return run(parse_key_values(key_values(argv), AverageConfig))


def save(run_dir: Path, name: str, step: int, value: float) -> None:
    payload = {
        "format": 1,
        "model": {"w": torch.full((2, 3), value), "b": torch.tensor([value, -value])},
        "config": {"model": {"d_model": 8}},
        "vocab": {"src_size": 10, "tgt_size": 10, "pad_id": 0},
        "step": step,
        "metrics": {},
        "optimizer": {"state": torch.ones(1)},
    }
    atomic_save(payload, run_dir / "checkpoints" / f"{name}.pt")


def test_averages_the_newest_periodic_checkpoints(tmp_path, capsys):
    for step, value in [(100, 1.0), (200, 2.0), (300, 4.0), (400, 9.0)]:
        save(tmp_path, f"step_{step}", step, value)
    save(tmp_path, "last", 400, 9.0)
    output = main([f"run={tmp_path}", "last=3"])
    averaged = load_checkpoint(output)
    assert torch.equal(averaged["model"]["w"], torch.full((2, 3), 5.0))  # (2 + 4 + 9) / 3
    assert torch.equal(averaged["model"]["b"], torch.tensor([5.0, -5.0]))
    assert averaged["step"] == 400 and "optimizer" not in averaged
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == [200, 300, 400]
    assert err.splitlines() == [
        f"averaged 3 checkpoints (step_200.pt, step_300.pt, step_400.pt; updates 200, 300, 400) into {output}"
    ]


def test_fewer_periodic_checkpoints_than_asked_is_refused(tmp_path):
    # It used to "average" step_200.pt alone, without a word.
    save(tmp_path, "step_200", 200, 1.0)
    with pytest.raises(UserError) as info:
        main([f"run={tmp_path}", "last=5"])
    assert str(info.value) == (
        f"{tmp_path}: last=5 asks for 5 periodic checkpoints but the run has 1 (step_200.pt); "
        "give last=1 to average those"
    )
    assert not (tmp_path / "checkpoints" / "averaged.pt").exists()


def test_a_newer_last_checkpoint_is_pointed_out(tmp_path, capsys):
    save(tmp_path, "step_200", 200, 1.0)
    save(tmp_path, "last", 274, 3.0)
    main([f"run={tmp_path}", "last=1"])
    warning = capsys.readouterr().err.splitlines()[-1]
    assert warning == (
        f"warning: {tmp_path / 'checkpoints' / 'last.pt'} (update 274) is newer than every checkpoint averaged "
        "and is not in the average"
    )


def test_it_is_a_console_command_with_one_line_errors(tmp_path):
    result = subprocess.run(
        [str(BIN / "seq2seq-average"), f"run={tmp_path}"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {tmp_path}: no checkpoints/step_*.pt to average"]


def test_the_first_half_of_a_short_run_is_not_averaged(tmp_path, capsys):
    # A 500-update run saving every 100: "the last 5" are updates 100-500, most of the run. Its
    # average scored 18.7 BLEU against best.pt's 28.6; it used to be written with no more than a note.
    for step in (100, 200, 300, 400, 500):
        save(tmp_path, f"step_{step}", step, float(step))
    save(tmp_path, "last", 500, 500.0)
    with pytest.raises(UserError) as info:
        main([f"run={tmp_path}", "last=5"])
    assert str(info.value) == (
        f"{tmp_path}: last=5 averages updates 100-500, reaching back into the first half of this 500-update run, "
        "where the weights are still far from where training ended; give last=3, or force=true to average them anyway"
    )
    assert not (tmp_path / "checkpoints" / "averaged.pt").exists()
    output = main([f"run={tmp_path}", "last=3"])  # 300, 400, 500: the second half
    assert load_checkpoint(output)["averaged_steps"] == [300, 400, 500]
    forced = main([f"run={tmp_path}", "last=5", "force=true", f"output={tmp_path / 'all.pt'}"])
    assert torch.equal(load_checkpoint(forced)["model"]["w"], torch.full((2, 3), 300.0))  # (100 + ... + 500) / 5


def test_a_last_pt_beyond_the_periodic_ones_counts_as_the_end_of_the_run(tmp_path):
    # Stopped by its clock at update 900, 500 updates after its newest periodic checkpoint.
    for step in (300, 400):
        save(tmp_path, f"step_{step}", step, 1.0)
    save(tmp_path, "last", 900, 1.0)
    with pytest.raises(UserError, match=r"last=2 averages updates 300-400, .* this 900-update run"):
        main([f"run={tmp_path}", "last=2"])


def test_it_takes_key_value_arguments_and_refuses_the_old_form(tmp_path, capsys):
    # The console script's main, in this process: test_it_is_a_console_command_with_one_line_errors
    # goes through the installed script.
    for step in (300, 400):
        save(tmp_path, f"step_{step}", step, float(step))
    average_main([f"run={tmp_path}", "last=2", f"output={tmp_path / 'a.pt'}"])
    result = capsys.readouterr()
    assert json.loads(result.out)["steps"] == [300, 400] and "warning" not in result.err
    for old, given in (
        ([str(tmp_path), "--last", "2", "--output", str(tmp_path / "b.pt")], "--last: give last=N"),
        ([f"run={tmp_path}", "--last=2"], "--last=2: give last=N"),
        ([str(tmp_path / "step_300.pt"), str(tmp_path / "step_400.pt")], f"{tmp_path / 'step_300.pt'}: expected"),
    ):
        with pytest.raises(SystemExit) as bad:
            average_main(old)
        stderr = capsys.readouterr().err
        assert bad.value.code == 2 and len(stderr.splitlines()) == 1, stderr
        assert given in stderr and "run=<run dir> [last=5]" in stderr
    assert not (tmp_path / "b.pt").exists() and sorted(p.name for p in tmp_path.glob("*.pt")) == ["a.pt"]
    with pytest.raises(SystemExit) as bad:
        average_main([f"run={tmp_path}", "last=two"])
    stderr = capsys.readouterr().err
    assert bad.value.code == 2 and len(stderr.splitlines()) == 1 and "last" in stderr


def test_checkpoints_of_runs_with_other_tokenizers_are_not_averaged(tmp_path):
    # Two runs' checkpoints of one shape were averaged into weights whose ids mean two sets of tokens.
    from seq2seq.data.tokenizer import Tokenizers

    corpora = {"one": ["a b c d e", "f g h"], "two": ["u v w x y", "z q r"]}
    for name, texts in corpora.items():
        save(tmp_path / name, "step_100", 100, 1.0)
        Tokenizers.train(texts * 20, [t.upper() for t in texts] * 20, "bpe", 270, joint=True).save(tmp_path / name)
    one, two = (tmp_path / name / "checkpoints" / "step_100.pt" for name in corpora)
    with pytest.raises(UserError) as info:
        main([f"checkpoints={one},{two}"])
    assert str(info.value) == (
        f"{two}: its tokenizer differs from that of {one}; an average needs checkpoints that share one "
        "tokenizer (checkpoints of one run)"
    )
    # Copied away from their tokenizers, the fingerprints the checkpoints record tell them apart.
    for name, fingerprint in (("a", "f1"), ("b", "f2")):
        save(tmp_path / name, "step_100", 100, 1.0)
        path = tmp_path / name / "checkpoints" / "step_100.pt"
        payload = load_checkpoint(path)
        atomic_save({**payload, "vocab": {**payload["vocab"], "tokenizer": fingerprint}}, path)
    with pytest.raises(UserError, match=r"step_100\.pt: it was trained with another tokenizer than .*/a/checkpoints"):
        main([f"checkpoints={tmp_path / 'a/checkpoints/step_100.pt'},{tmp_path / 'b/checkpoints/step_100.pt'}"])


def test_checkpoints_with_other_vocabulary_sizes_are_one_line(tmp_path):
    # torch.stack's "stack expects each tensor to be equal size", a traceback.
    save(tmp_path, "step_100", 100, 1.0)
    other = load_checkpoint(tmp_path / "checkpoints" / "step_100.pt")
    other["vocab"] = {**other["vocab"], "src_size": 12, "tgt_size": 12}
    other["model"] = {**other["model"], "w": torch.ones(4, 3)}
    atomic_save(other, tmp_path / "checkpoints" / "step_200.pt")
    first, second = (tmp_path / "checkpoints" / f"step_{step}.pt" for step in (100, 200))
    with pytest.raises(UserError) as info:
        main([f"checkpoints={first},{second}"])
    assert str(info.value) == (
        f"{second}: its vocabularies have 12/12 entries, those of {first} 10/10: checkpoints of different runs "
        "cannot be averaged"
    )


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        # yaml's ParserError, a traceback; then "not a value YAML can read", though a path is text
        ("checkpoints=,", "checkpoints=,: names no file; give checkpoints=a.pt,b.pt"),
        ("checkpoints=',,'", "checkpoints=,,: names no file; give checkpoints=a.pt,b.pt"),
    ],
)  # fmt: skip
def test_checkpoints_naming_no_file_is_one_line(argument, message):
    with pytest.raises(UserError) as info:
        main([argument])
    assert str(info.value) == message


def test_a_directory_among_the_checkpoints_is_named_as_one(tmp_path):
    # It said "no such file" of a directory that is there.
    save(tmp_path, "step_100", 100, 1.0)
    with pytest.raises(UserError) as info:
        main([f"checkpoints={tmp_path / 'checkpoints' / 'step_100.pt'},{tmp_path}"])
    assert str(info.value) == f"checkpoints: {tmp_path}: a directory, not a checkpoint file (a run directory: run=)"
    with pytest.raises(UserError, match=r": no such file$"):
        main([f"checkpoints={tmp_path / 'absent.pt'}"])


def test_output_onto_a_checkpoint_averaged_is_refused(tmp_path):
    # checkpoints=a.pt,b.pt output=a.pt replaced a.pt with the average.
    save(tmp_path, "step_100", 100, 1.0)
    save(tmp_path, "step_200", 200, 3.0)
    first, second = tmp_path / "checkpoints" / "step_100.pt", tmp_path / "checkpoints" / "step_200.pt"
    before = first.read_bytes()
    with pytest.raises(UserError) as info:
        main(
            [
                f"checkpoints={first},{second}",
                f"output={tmp_path / 'checkpoints' / '..' / 'checkpoints' / 'step_100.pt'}",
            ]
        )
    assert str(info.value) == (
        f"output={tmp_path / 'checkpoints' / '..' / 'checkpoints' / 'step_100.pt'}: is {first}, one of the checkpoints "
        "averaged; give output= another file"
    )
    assert first.read_bytes() == before


def test_output_onto_a_runs_training_checkpoint_is_refused(tmp_path):
    for step, value in [(100, 1.0), (200, 2.0), (300, 4.0), (400, 9.0)]:
        save(tmp_path, f"step_{step}", step, value)
    save(tmp_path, "best", 300, 4.0)
    best = tmp_path / "checkpoints" / "best.pt"
    before = best.read_bytes()
    with pytest.raises(UserError) as info:
        main([f"run={tmp_path}", "last=2", f"output={best}"])
    assert str(info.value) == (
        f"output={best}: is a training checkpoint (a run resumes and translates from it); give output= another file"
    )
    assert best.read_bytes() == before
    again = main([f"run={tmp_path}", "last=2"])  # the default output, an earlier average, is replaced as before
    assert main([f"run={tmp_path}", "last=2", f"output={again}"]) == again


def test_sigterm_while_saving_the_average_leaves_no_temporary_file(tmp_path, monkeypatch):
    # SIGTERM's default action ended the process without its cleanup: .averaged.pt.*.tmp stayed.
    import os
    import signal

    import seq2seq.artifacts.checkpoint as checkpoint

    for step, value in [(100, 1.0), (200, 2.0)]:
        save(tmp_path, f"step_{step}", step, value)
    real = checkpoint.torch.save

    def save_then_die(payload: object, handle: object) -> None:
        real(payload, handle)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(checkpoint.torch, "save", save_then_die)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit) as info:
            average_main([f"run={tmp_path}", "last=2", "force=true"])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert info.value.code == 128 + signal.SIGTERM
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_100.pt", "step_200.pt"]


def make_run(root: Path, name: str) -> Path:
    """A run directory as training leaves it: its marker, checkpoints, tokenizer, log and exports."""
    from seq2seq.artifacts.run_dir import MARKER_TEXT, RUN_MARKER

    run_dir = root / name
    for step, value in [(100, 1.0), (200, 2.0), (300, 4.0)]:
        save(run_dir, f"step_{step}", step, value)
    (run_dir / RUN_MARKER).write_text(MARKER_TEXT)
    (run_dir / "tokenizer.json").write_text('{"model": "a tokenizer"}')
    (run_dir / "train.log").write_text("update 300\n")
    (run_dir / "model").mkdir()
    (run_dir / "model" / "model.safetensors").write_bytes(b"weights")
    (run_dir / "ctranslate2").mkdir()
    (run_dir / "ctranslate2" / "model.bin").write_bytes(b"ctranslate2 model")
    return run_dir


@pytest.mark.parametrize(
    "target, extra",
    [
        ("A/tokenizer.json", ["force=true"]),  # force= is about the first half of a run, nothing else
        ("A/model/model.safetensors", []),
        ("A/train.log", []),
        ("work/in.txt", []),  # a user's own file, in no run
        ("B/ctranslate2/model.bin", []),  # another run's export
    ],
)
def test_output_onto_a_file_the_command_did_not_write_is_refused(tmp_path, target, extra):
    # Each of these was overwritten with the average, exit status 0 (issue 62, items 1-5).
    run_a, _ = make_run(tmp_path, "A"), make_run(tmp_path, "B")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "in.txt").write_text("a user's text\n")
    output = tmp_path / target
    before = output.read_bytes()
    with pytest.raises(UserError) as info:
        main([f"run={run_a}", "last=2", f"output={output}", *extra])
    message = str(info.value)
    assert message.startswith(f"output={output}: already exists and is ") and "replace_output=true" in message
    in_a_run = target.startswith(("A/", "B/"))
    assert ("a file of the run" in message) == in_a_run
    assert output.read_bytes() == before
    assert not (run_a / "checkpoints" / "averaged.pt").exists()


def test_replace_output_replaces_exactly_the_file_named(tmp_path):
    run_a = make_run(tmp_path, "A")
    mine = tmp_path / "mine.pt"
    mine.write_text("not a checkpoint")
    assert main([f"run={run_a}", "last=2", f"output={mine}", "replace_output=true"]) == mine
    assert torch.equal(load_checkpoint(mine)["model"]["w"], torch.full((2, 3), 3.0))
    # Not even with replace_output=true: the checkpoint a run resumes from.
    with pytest.raises(UserError, match="is a training checkpoint"):
        main([f"run={run_a}", "last=2", f"output={run_a / 'checkpoints' / 'step_100.pt'}", "replace_output=true"])


def test_an_average_this_command_wrote_is_replaced_until_someone_changes_it(tmp_path, monkeypatch):
    run_a = make_run(tmp_path, "A")
    output = tmp_path / "out.pt"
    main([f"run={run_a}", "last=2", f"output={output}"])
    main([f"run={run_a}", "last=3", f"output={output}", "force=true"])  # its own output: replaced without a flag
    assert load_checkpoint(output)["averaged_steps"] == [100, 200, 300]
    # The ledger forgotten (another machine, a cleared cache): an average is still recognised as one.
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "other-cache"))
    main([f"run={run_a}", "last=2", f"output={output}"])
    # Someone put their own file there since: refused.
    output.write_text("notes")
    with pytest.raises(UserError, match="already exists"):
        main([f"run={run_a}", "last=2", f"output={output}"])
    assert output.read_text() == "notes"


def test_output_onto_a_directory_is_one_line(tmp_path):
    run_a = make_run(tmp_path, "A")
    (tmp_path / "work").mkdir()
    with pytest.raises(UserError) as info:
        main([f"run={run_a}", "last=2", f"output={tmp_path / 'work'}"])
    assert str(info.value) == f"output={tmp_path / 'work'}: is a directory; give output= a file"
