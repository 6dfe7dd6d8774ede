"""`seq2seq-serve`: a LibreTranslate-compatible HTTP server for a trained model (seq2seq/serve/).

Its arguments are `key=value` pairs over one flat schema (ServeConfig), parsed as seq2seq-translate
parses its own: by OmegaConf, or by Hydra when the command line asks for it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Any

from seq2seq.allocator import relaunch_with_tcmalloc

if __name__ == "__main__":  # `python -m seq2seq.cli.serve`: the console script does it in launch.py
    relaunch_with_tcmalloc("seq2seq-serve", __name__)

from seq2seq.cli.common import CONFIG_PATH, parse_key_values, print_help, report_errors, wants_help
from seq2seq.cli.translate import wants_hydra
from seq2seq.config import ServeConfig, UserError, register_configs, serve_translate_config, validate_server
from seq2seq.inference.job import decoding_job
from seq2seq.inference.resolved_model import resolve
from seq2seq.serve.plan import ModelPlan, ServePlan
from seq2seq.serve.requests import Limits
from seq2seq.startup import prepare_process

USAGE = "run=<run dir> [port=5000] [key=value ...]"


def main() -> None:
    argv = several_runs(sys.argv[1:])
    debug = "debug=true" in argv
    if wants_help(argv):
        register_configs()
        report_errors(lambda: print_help(argv, "seq2seq-serve", USAGE, ServeConfig), False)
    elif wants_hydra(argv):
        import hydra

        from seq2seq.cli.common import check_override_keys

        report_errors(lambda: check_override_keys(argv, ServeConfig), debug)
        register_configs()
        hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="serve")(_serve)()
    else:
        _serve(report_errors(lambda: parse_key_values(argv, ServeConfig), debug))


def several_runs(argv: list[str]) -> list[str]:
    """`run=A run=B ...`: the first is run=, the others runs=[...] (OmegaConf would keep the last alone)."""
    import json

    runs = [argument.partition("=")[2] for argument in argv if argument.startswith("run=")]
    if len(runs) < 2:
        return argv
    rest = [argument for argument in argv if not argument.startswith("run=")]
    return [f"run={runs[0]}", f"runs={json.dumps(runs[1:])}", *rest]


def serve_plan(cfg: Any) -> ServePlan:
    """seq2seq-serve's plan, built once from its config: each model's decoding job (the decoding keys
    validated once, then the server's own; each model resolved) and the server's bounds. Nothing below
    cli/ reads the config."""
    job = decoding_job(serve_translate_config(cfg))
    validate_server(cfg)
    _refuse_a_model_named_twice([cfg.run or cfg.checkpoint, *cfg.runs])
    # Each further run decodes as run= does, with the languages its own model records.
    further = [ModelPlan(dataclasses.replace(job, model=resolve(str(run), None))) for run in cfg.runs]
    return ServePlan(
        models=(ModelPlan(job, cfg.source_lang, cfg.target_lang), *further),
        host=cfg.host,
        port=cfg.port,
        limits=Limits(cfg.max_request_lines, cfg.max_line_chars, cfg.max_beam),
        max_batch_tokens=cfg.max_batch_tokens,
        max_wait_ms=cfg.max_wait_ms,
        cors_origins=tuple(cfg.cors_origins),
        max_file_bytes=cfg.max_file_bytes,
        drain_seconds=cfg.drain_seconds,
        receive_seconds=cfg.receive_seconds,
        api_keys_file=cfg.api_keys_file,
    )


def _refuse_a_model_named_twice(named: list[Any]) -> None:
    """Each model is loaded (its engines, its memory), and where two serve one direction the second is
    never used: the same run given twice is a mistake, said before either loads."""
    first: dict[Path, str] = {}
    for given in named:
        where = Path(str(given)).resolve()
        if where in first:
            raise UserError(f"runs: {given} is {first[where]} again; give each model once")
        first[where] = str(given)


def _serve(cfg: Any) -> None:
    level = logging.DEBUG if cfg.debug else logging.INFO
    logging.basicConfig(stream=sys.stderr, level=level, format="[%(levelname)s] %(message)s")
    plan = report_errors(lambda: serve_plan(cfg), cfg.debug)  # a bad value answers before torch is loaded
    prepare_process()
    try:  # the server's packages are an extra: say how to get them, in one line
        from seq2seq.serve.command import serve
    except ImportError as err:
        name = err.name
        report_errors(lambda: _missing(name), cfg.debug)
    report_errors(lambda: serve(plan), cfg.debug)


def _missing(name: str | None) -> None:
    from seq2seq.config import UserError

    raise UserError(f"seq2seq-serve needs {name}: pip install 'seq2seq[serve]'")


if __name__ == "__main__":
    main()
