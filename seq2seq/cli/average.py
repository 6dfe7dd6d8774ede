"""`seq2seq-average key=value ...` (seq2seq/average.py); a bad key, run directory or file is one line
on stderr, exit status 2. The old `seq2seq-average <run> --last N` still works, with a warning."""

from __future__ import annotations

import sys

from seq2seq.average import run
from seq2seq.cli.common import parse_key_values, print_key_help, report_errors, wants_help
from seq2seq.config import AverageConfig

USAGE = "run=<run dir> [last=5] [output=...] | checkpoints=a.pt,b.pt [output=...]"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print_key_help("seq2seq-average", USAGE, AverageConfig)
        return
    report_errors(lambda: run(parse_key_values(key_values(argv), AverageConfig)), debug=False)


def key_values(argv: list[str]) -> list[str]:
    """The arguments as key=value; the old form (`<run> --last N --output X`, or files) is translated,
    with a warning that names the new one."""
    if all("=" in a and not a.startswith("-") for a in argv):
        return argv
    translated, inputs, rest = [], [], list(argv)
    while rest:
        argument = rest.pop(0)
        if argument in ("--last", "--output") and rest:
            translated.append(f"{argument.removeprefix('--')}={rest.pop(0)}")
        elif argument.startswith(("--last=", "--output=")):
            translated.append(argument.removeprefix("--"))
        else:
            inputs.append(argument)
    if len(inputs) == 1 and "=" not in inputs[0] and not inputs[0].endswith(".pt"):
        translated.insert(0, f"run={inputs[0]}")
    elif inputs:
        translated.insert(0, f"checkpoints={','.join(inputs)}")
    print(f"warning: this form is deprecated; use: seq2seq-average {' '.join(translated)}", file=sys.stderr)
    return translated


if __name__ == "__main__":
    main()
