"""Kept for old command lines: the averaging is the `seq2seq-average` console command
(seq2seq/cli/average.py), which a `pip install .` user gets too."""

from __future__ import annotations

from seq2seq.cli.average import main

if __name__ == "__main__":
    main()
