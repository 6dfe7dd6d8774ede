"""What both console scripts share: one-line errors and Hydra's config location."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from seq2seq.config import UserError

# The YAML files live in configs/ at the top of the repository and are installed as the
# seq2seq.configs package (see pyproject.toml), so Hydra finds them from any install.
CONFIG_PATH = "pkg://seq2seq.configs"
T = TypeVar("T")


def report_errors(run: Callable[[], T], debug: bool) -> T:
    """Runs `run`; a UserError (bad file, bad config, bad checkpoint) becomes one line on stderr
    and exit status 2, unless `debug` asks for the traceback."""
    try:
        return run()
    except UserError as err:
        if debug:
            raise
        print(f"error: {err}", file=sys.stderr)
        _append_to_log_files(f"error: {err}")
        sys.exit(2)


def _append_to_log_files(message: str) -> None:
    """The error also goes to the run's train.log (not to the console twice)."""
    record = logging.makeLogRecord({"msg": message, "levelno": logging.ERROR, "levelname": "ERROR", "name": "seq2seq"})
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(record)
