"""`seq2seq-average`: average the weights of the last N periodic checkpoints of a run (or of the files given).

    seq2seq-average run=outputs/<date>/<time> last=5
    seq2seq-average checkpoints=a.pt,b.pt,c.pt output=averaged.pt

The averaging and its rules are seq2seq/averaging.py's. Says on stderr what it averaged; prints one
JSON object on stdout: the inputs, their updates and the output. A bad key, run directory or file is
one line on stderr, exit status 2. The old `seq2seq-average <run> --last N` form is refused with the key=value one.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from seq2seq.cli.common import parse_key_values, print_key_help, report_errors, wants_help
from seq2seq.config import AverageConfig, UserError
from seq2seq.stop_signals import stop_signals_raise

COMMAND = "seq2seq-average"
USAGE = "run=<run dir> [last=5] [output=...] | checkpoints=a.pt,b.pt [output=...]"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print_key_help("seq2seq-average", USAGE, AverageConfig)
        return
    with stop_signals_raise():  # SIGTERM mid-save: the temporary file beside output= goes too
        report_errors(lambda: run(parse_key_values(key_values(argv), AverageConfig)), debug=False)


def key_values(argv: list[str]) -> list[str]:
    """The arguments, each key=value; the form before them (`<run> --last N --output X`) is refused with
    the one that replaced it."""
    for argument in sorted(argv, key=lambda a: not a.startswith("-")):  # an old flag named first
        if argument.startswith("-") or "=" not in argument:
            flag = argument.lstrip("-").partition("=")[0]
            given = (
                f"give {flag}=N" if flag == "last" else f"give {flag}=..." if flag == "output" else "expected key=value"
            )
            raise UserError(f"{argument}: {given}: seq2seq-average {USAGE}")
    return argv


def average_files(paths: list[Path], output: Path, replace_output: bool = False) -> Path:
    """Averages `paths` into `output`; says what it averaged on stderr and prints the JSON summary."""
    from seq2seq.artifacts.checkpoint import atomic_save
    from seq2seq.artifacts.replacing import output_lock, record
    from seq2seq.averaging import average

    # One writer per output; atomic_save writes a new file and renames it over the old one.
    with output_lock(output, "output", COMMAND):
        refuse_replacing(paths, output, replace_output)
        result = average(paths)
        atomic_save(result, output)
        record(output, COMMAND)
    steps = result["averaged_steps"]
    print(
        f"averaged {len(paths)} checkpoint{'s' if len(paths) > 1 else ''} "
        f"({', '.join(p.name for p in paths)}; updates {', '.join(map(str, steps))}) into {output}",
        file=sys.stderr,
    )
    json.dump({"inputs": [str(p) for p in paths], "steps": steps, "output": str(output)}, sys.stdout)
    print()
    return output


def refuse_replacing(paths: list[Path], output: Path, replace_output: bool) -> None:
    """The average replaces `output` whole: never one of the checkpoints averaged, nor a checkpoint a run
    resumes from (best.pt, last.pt, step_N.pt: the run's own, which the average would stand in for, even
    with replace_output=true); any other existing file only by the rule every writer follows
    (seq2seq/artifacts/replacing.py): an average this command wrote, or replace_output=true."""
    from seq2seq.artifacts.checkpoint import checkpoint_keys
    from seq2seq.artifacts.replacing import check_replaceable

    if not output.is_file():
        check_replaceable(output, "output", COMMAND, replace_output)  # a directory is refused
        return
    for path in paths:
        if os.path.samefile(path, output):
            raise UserError(f"output={output}: is {path}, one of the checkpoints averaged; give output= another file")
    keys = checkpoint_keys(output)  # read once: a training checkpoint, or an average (its own kind)
    if keys is not None and "optimizer" in keys:
        raise UserError(
            f"output={output}: is a training checkpoint (a run resumes and translates from it); "
            "give output= another file"
        )
    averaged = keys is not None and "averaged_from" in keys
    check_replaceable(output, "output", COMMAND, replace_output, own_kind=lambda _: averaged)


def run(cfg: AverageConfig) -> Path:
    """`seq2seq-average run=<dir> last=N` or `checkpoints=a.pt,b.pt`."""
    if (cfg.run is None) == (cfg.checkpoints is None):
        raise UserError("run: give run=<run directory> or checkpoints=<a.pt,b.pt,...> (one of them)")
    if cfg.last < 1:
        raise UserError(f"last={cfg.last}: must be at least 1")
    if cfg.checkpoints is not None:  # the paths first, then torch: a typo is answered at once
        paths = [Path(p) for p in str(cfg.checkpoints).split(",") if p]
        if not paths:
            raise UserError(f"checkpoints={cfg.checkpoints}: names no file; give checkpoints=a.pt,b.pt")
        missing = [p for p in paths if not p.is_file()]
        if missing:
            what = (
                "a directory, not a checkpoint file (a run directory: run=)" if missing[0].is_dir() else "no such file"
            )
            raise UserError(f"checkpoints: {missing[0]}: {what}")
        return average_files(
            paths, Path(cfg.output) if cfg.output else paths[0].with_name("averaged.pt"), cfg.replace_output
        )
    run_dir = Path(cfg.run)
    if not run_dir.is_dir():
        raise UserError(f"run={run_dir}: no such run directory")
    from seq2seq.artifacts.run_dir import RunDir
    from seq2seq.averaging import end_of_run, newer_last, periodic_checkpoints

    paths = periodic_checkpoints(run_dir, cfg.last)
    end_of_run(run_dir, paths, cfg.force)
    run = RunDir(run_dir)
    output = average_files(paths, Path(cfg.output) if cfg.output else run.checkpoint("averaged"), cfg.replace_output)
    newest = max(RunDir.step_of(p) for p in paths)
    if (newer := newer_last(run_dir, newest)) is not None:
        print(
            f"warning: {run.checkpoint('last')} (update {newer}) is newer than every checkpoint "
            "averaged and is not in the average",
            file=sys.stderr,
        )
    return output


if __name__ == "__main__":
    main()
