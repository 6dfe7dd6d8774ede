"""`seq2seq-distill`: sequence-level knowledge distillation in one command (docs/distill.md).

    seq2seq-distill teacher=<run> output=<new folder> [student=small] [nbest=4 select=chrf min_score=20]
                    [data.KEY=VALUE ...: the corpus, over the teacher's data settings]
                    [train.KEY=VALUE ...: the student's training, over the teacher's]

The work is seq2seq/distill/command.py's. The command line is checked before torch is imported; a bad
key, value, teacher or corpus is one line on stderr, exit status 2, and nothing is written. Rerun the
same command after a kill or Ctrl-C: it goes on where it stopped. Prints result.json on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from seq2seq.cli.common import exit_on_interrupt, parse_key_values, print_key_help, report_errors, wants_help
from seq2seq.config import DistillConfig, UserError, validate_distill

USAGE = (
    "teacher=<run> output=<new folder> [student=small] [key=value ...] "
    "[data.KEY=VALUE ... (the corpus)] [train.KEY=VALUE ... (the student's training)]"
)
PASSED_ON = ("data.", "train.")  # arguments for the corpus and the student's config, checked by seq2seq.distill


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if wants_help(argv):
        print_key_help("seq2seq-distill", USAGE, DistillConfig)
        return
    debug = "debug=true" in argv

    def run() -> dict:
        for argument in argv:
            if argument.startswith(PASSED_ON) and "=" not in argument:
                raise UserError(f"{argument}: expected key=value; --help lists the keys")
        cfg = parse_key_values([a for a in argv if not a.startswith(PASSED_ON)], DistillConfig)
        validate_distill(cfg)
        for path in str(cfg.teacher or "").split(","):  # a path typed wrong is answered before torch loads
            if path and not Path(path).exists():
                raise UserError(f"teacher={cfg.teacher}: {path}: no such file or directory; give a run directory")
        from seq2seq.startup import prepare_process

        prepare_process()  # the command line is good: the work starts, and torch is imported from here on
        from seq2seq.distill.command import distill

        data = [a for a in argv if a.startswith("data.")]
        train = [a.removeprefix("train.") for a in argv if a.startswith("train.")]
        return distill(cfg, data, train)

    result = exit_on_interrupt(lambda: report_errors(run, debug), debug)
    if result.get("exit_status"):  # the student's training stopped by a signal, after saving: rerun to resume
        sys.exit(result["exit_status"])
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
