"""`seq2seq-average`: checkpoint averaging (`seq2seq.average.main`); a bad run directory or file is one
line on stderr, exit status 2."""

from __future__ import annotations

from seq2seq.average import main as average
from seq2seq.cli.common import report_errors


def main() -> None:
    report_errors(average, debug=False)


if __name__ == "__main__":
    main()
