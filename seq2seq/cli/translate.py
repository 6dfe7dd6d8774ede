"""`seq2seq-translate`: a Unix filter from source lines to translations (logs go to stderr).

Its arguments are `key=value` pairs over one flat schema (TranslateConfig: no config groups, no run
directory), so OmegaConf parses them directly; Hydra (whose import adds to every start,
beyond omegaconf's: docs/performance.md) is used only when the command line asks for it (its flags such as
-m or --cfg, hydra.* keys, + or ~ overrides). Both give the same config (tests/test_cli.py).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from seq2seq.allocator import relaunch_with_tcmalloc

if __name__ == "__main__":  # `python -m seq2seq.cli.translate`: the console script does it in launch.py
    relaunch_with_tcmalloc("seq2seq-translate", __name__)  # before torch is imported: see seq2seq/allocator.py

from seq2seq.artifacts.path_kind import check_named_models_exist
from seq2seq.cli.common import (
    CONFIG_PATH,
    check_resolves,
    exit_on_interrupt,
    parse_key_values,
    print_help,
    report_errors,
    wants_help,
)
from seq2seq.config import TranslateConfig, register_configs
from seq2seq.inference.job import TranslatePlan, decoding_job
from seq2seq.startup import prepare_process

USAGE = "run=<run dir> [key=value ...] < input > output"


def main() -> None:
    argv = sys.argv[1:]
    debug = "debug=true" in argv
    if wants_help(argv):
        register_configs()  # the help composes translate.yaml, whose schema is registered here
        report_errors(lambda: print_help(argv, "seq2seq-translate", USAGE, TranslateConfig), False)
    elif wants_hydra(argv):
        _translate_with_hydra(argv, debug)
    else:
        _translate(report_errors(lambda: parse_key_values(argv, TranslateConfig), debug))


def wants_hydra(argv: list[str]) -> bool:
    """A Hydra flag (-m, --cfg job, --info, ...), a hydra.* key, or a + / ~ override."""
    return any(a.startswith(("-", "+", "~", "hydra.", "hydra/", "hydra=")) for a in argv)


def _translate_with_hydra(argv: list[str], debug: bool) -> None:
    import hydra

    from seq2seq.cli.common import check_override_keys

    report_errors(lambda: check_override_keys(argv, TranslateConfig), debug)
    register_configs()
    hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="translate")(_translate)()


def translate_plan(cfg: Any) -> TranslatePlan:
    """seq2seq-translate's plan, built once from its config: the decoding job (validated, its model
    resolved) and the files it reads and writes. Nothing below cli/ reads the config."""
    return TranslatePlan(decoding_job(cfg), cfg.input, cfg.output, cfg.replace_output, cfg.reference)


def translate(cfg: Any) -> dict[str, Any]:
    """seq2seq-translate's work on a translate config given from code (the tests', a script's): its plan
    built, then translated (seq2seq.inference.command.translate), without the command's process set-up."""
    plan = translate_plan(cfg)
    from seq2seq.inference.command import translate as run

    return run(plan)


def _translate(cfg: Any) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(levelname)s] %(message)s")
    report_errors(lambda: check_resolves(cfg), "debug=true" in sys.argv)  # before cfg.debug is read
    plan = report_errors(lambda: translate_plan(cfg), cfg.debug)  # a bad value answers before torch is loaded
    model = plan.job.model
    report_errors(lambda: check_named_models_exist([model.run], model.checkpoint), cfg.debug)  # so does a bad path
    prepare_process()
    from seq2seq.inference.command import translate as run  # torch or ctranslate2: only for a good config

    # Ctrl-C: every chunk before it was written and flushed; no traceback.
    exit_on_interrupt(lambda: report_errors(lambda: run(plan), cfg.debug), cfg.debug)


if __name__ == "__main__":
    main()
