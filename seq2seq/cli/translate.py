"""`seq2seq-translate`: a Unix filter from source lines to translations (logs go to stderr)."""

from __future__ import annotations

import logging
import sys

from seq2seq.allocator import relaunch_with_tcmalloc

if __name__ == "__main__":  # `python -m seq2seq.cli.translate`: the console script does it in launch.py
    relaunch_with_tcmalloc("seq2seq-translate", __name__)  # before torch is imported: see seq2seq/allocator.py

import hydra
from omegaconf import DictConfig

from seq2seq.cli.common import CONFIG_PATH, check_override_keys, print_help, report_errors, wants_help
from seq2seq.config import TranslateConfig, register_configs

register_configs()


def main() -> None:
    if wants_help(sys.argv[1:]):
        usage = "run=<run dir> [key=value ...] < input > output"
        report_errors(lambda: print_help(sys.argv[1:], "seq2seq-translate", usage, TranslateConfig), False)
        return
    report_errors(lambda: check_override_keys(sys.argv[1:], TranslateConfig), "debug=true" in sys.argv)
    _hydra_main()


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="translate")
def _hydra_main(cfg: DictConfig) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(levelname)s] %(message)s")
    # Imported here so that `--help` and config errors answer before torch is loaded.
    from seq2seq.inference.command import translate

    report_errors(lambda: translate(cfg), cfg.debug)


if __name__ == "__main__":
    main()
