"""Kept for old command lines: the averaging is the `seq2seq-average` console command
(seq2seq/average.py), which a `pip install .` user gets too."""

from __future__ import annotations

from seq2seq.average import cli, main  # noqa: F401  (scripts/reproduce.py imports main)

if __name__ == "__main__":
    cli()
