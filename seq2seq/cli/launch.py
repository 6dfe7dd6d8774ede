"""The console scripts' entry points (`[project.scripts]` in pyproject.toml).

Each first re-launches the process on tcmalloc (`seq2seq.allocator`), explicitly and before the
command's own module imports Hydra and torch (which a re-launch would otherwise import twice), then
runs the command's `main`, which checks its command line and config before it prepares the process
(seq2seq/startup.py) and imports torch: a config error is one line without torch. The re-launch comes
first even so: it costs an interpreter start, while checking before it would check every good command
line twice (once in each process). Importing this module does nothing.
"""

from __future__ import annotations

from seq2seq.allocator import relaunch_with_tcmalloc


def train() -> None:
    """`seq2seq-train`"""
    relaunch_with_tcmalloc("seq2seq-train", __name__)
    from seq2seq.cli.train import main

    main()


def translate() -> None:
    """`seq2seq-translate`"""
    relaunch_with_tcmalloc("seq2seq-translate", __name__)
    from seq2seq.cli.translate import main

    main()


def serve() -> None:
    """`seq2seq-serve`"""
    relaunch_with_tcmalloc("seq2seq-serve", __name__)
    from seq2seq.cli.serve import main

    main()


def distill() -> None:
    """`seq2seq-distill`"""
    relaunch_with_tcmalloc("seq2seq-distill", __name__)
    from seq2seq.cli.distill import main

    main()
