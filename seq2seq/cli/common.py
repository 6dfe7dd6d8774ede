"""What both console scripts share: one-line errors and Hydra's config location."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from seq2seq.config import UserError, list_keys, str_keys, typed_dotlist

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


def exit_on_interrupt(run: Callable[[], T], debug: bool) -> T:
    """Runs `run`; Ctrl-C that reaches here (before training installs its handler, or a second one
    while it saves) is one line and exit status 130, as a shell reports a command stopped by Ctrl-C
    (128 + SIGINT), unless `debug` asks for the traceback."""
    try:
        return run()
    except KeyboardInterrupt:
        if debug:
            raise
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def check_resolves(cfg: Any) -> None:
    """Every interpolation of a composed config resolves (`max_steps=${nope}` would otherwise fail
    where the key is first read, as a traceback): one line naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "config"
        raise UserError(f"config error: {key}: {str(err).strip().splitlines()[0]}") from err


def _append_to_log_files(message: str) -> None:
    """The error also goes to the run's train.log (not to the console twice)."""
    record = logging.makeLogRecord({"msg": message, "levelno": logging.ERROR, "levelname": "ERROR", "name": "seq2seq"})
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(record)


def check_override_keys(argv: list[str], schema: type, groups: tuple[str, ...] = ()) -> None:
    """Refuses, in one line, a command-line override whose key the schema does not have, with or
    without Hydra's `+` (which would otherwise add the key and run with it ignored), and a group
    option that does not exist. Runs before Hydra, so nothing is composed or created first."""
    known = _schema_keys(schema)
    for override in parse_command_line(argv)[1]:
        key = override.key_or_group
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if key in groups:
            _check_group_option(key, override)
        elif key not in known:
            close = difflib.get_close_matches(key, [*known, *groups], n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else "--help lists the keys"
            raise UserError(f"{key}: unknown key; {hint}")
        else:
            _check_value_type(schema, key, override)


def _check_value_type(schema: type, key: str, override: Any) -> None:
    """A value the schema's type cannot take (`max_steps=ten`), refused in one line like any other bad
    value: Hydra would answer it in four lines and exit status 1, after creating the run directory."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if override.is_delete() or override.value_type is None:
        return
    if key in list_keys(schema):  # a=x,y too: Hydra reads it as a sweep over x and y
        text = override.input_line.partition("=")[2] if override.input_line else override.value()
        check_list_value(key, text, override.value())
    if override.is_sweep_override():
        if not override.is_choice_sweep():
            return  # range() and interval() sweeps are numbers by construction
        values = list(override.sweep_iterator())
    else:
        values = [override.value()]
    config = OmegaConf.structured(schema)
    for value in values:
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation: resolved by Hydra later
        try:
            OmegaConf.update(config, key, value, merge=True)
        except OmegaConfBaseException as err:
            raise UserError(f"config error: {key}={value!r}: {str(err).strip().splitlines()[0]}") from err


def parse_key_values(argv: list[str], schema: type) -> Any:
    """`key=value` arguments over a flat schema (no config groups, no Hydra flags), parsed by OmegaConf
    alone: the schema's defaults with the arguments merged on top and type-checked, as Hydra would
    compose them (tests/test_cli.py compares the two). A bad key or value is one line naming it."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    known, texts = _schema_keys(schema), str_keys(schema)
    for argument in argv:
        key, equals, value = argument.partition("=")
        if not equals:
            raise UserError(f"{argument}: expected key=value; --help lists the keys")
        if key not in known:
            close = difflib.get_close_matches(key.lstrip("+~"), known, n=1, cutoff=0.6)
            raise UserError(f"{key}: unknown key; {f'did you mean {close[0]}?' if close else '--help lists the keys'}")
        if key in texts:
            continue  # taken as typed (as_typed_text), not read as YAML
        try:  # each value is read as YAML: "," or "[a" is a YAML syntax error, not a string
            OmegaConf.from_dotlist([argument])
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise UserError(
                f"{key}={value}: not a value YAML can read ({problem}); quote it: \"{key}='{value}'\""
            ) from err
        if key in list_keys(schema):
            check_list_value(key, value, OmegaConf.from_dotlist([argument])[key])
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), typed_dotlist(argv, schema))
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "command line"
        raise UserError(f"{key}: {str(err).strip().splitlines()[0]}") from err
    check_resolves(merged)
    return merged


def parse_command_line(argv: list[str]) -> tuple[Any, list[Any]]:
    """Hydra's own parsing of the command line: (its flags, its overrides)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args, _ = get_args_parser().parse_known_args(argv)
    parser = OverridesParser.create()
    try:
        return args, parser.parse_overrides(args.overrides)
    except HydraException as err:
        for override in args.overrides:  # which one, and whether quoting it is the cure
            try:
                parser.parse_overrides([override])
            except HydraException:
                raise UserError(f"cannot parse the command line: {override}: {_parse_hint(override, err)}") from err
        raise UserError(f"cannot parse the command line: {str(err).splitlines()[0]}") from err


def _parse_hint(override: str, err: Exception) -> str:
    """Hydra's grammar takes no letter beyond ASCII unquoted: a path such as /tmp/rün must be quoted
    within the argument (its LexerNoViableAltException says none of that)."""
    key, equals, value = override.partition("=")
    if equals and value and value[0] not in "'\"" and not value.isascii():
        return f"Hydra reads non-ASCII letters only in quotes, inside the argument: \"{key}='{value}'\""
    return str(err).splitlines()[0]


def check_list_value(key: str, text: Any, value: Any) -> None:
    """A list key given one value without brackets (`back_translate=de-fr`), which OmegaConf answered
    with "AnyNode is not a ListConfig": one line saying how to write it. `value`: `text` as read. A
    list or null passes, for the schema to check its items."""
    from omegaconf import ListConfig

    if value is None or isinstance(value, ListConfig | list):
        return
    if isinstance(value, str) and "${" in value:
        return  # an interpolation: resolved later, and checked then
    raise UserError(f"config error: {key}={text}: takes a list, in brackets: {key}=[{text}]")


def _schema_keys(schema: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(schema):
        keys.append(prefix + f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys.extend(_schema_keys(type(default), f"{prefix}{f.name}."))
    return keys


def group_options(group: str) -> list[str]:
    directory = importlib.resources.files("seq2seq.configs") / group
    return sorted(p.name.removesuffix(".yaml") for p in directory.iterdir() if p.name.endswith(".yaml"))


def _check_group_option(group: str, override: Any) -> None:
    if override.is_delete() or override.value_type is None:
        return
    values = override.value()
    options = group_options(group)
    for value in values if isinstance(values, list) else [values]:
        if isinstance(value, str) and value not in options and value != "null":
            raise UserError(f"{group}={value}: unknown option; choose from {', '.join(options)}")


def wants_help(argv: list[str]) -> bool:
    return "--help" in argv or "-h" in argv


def print_help(argv: list[str], command: str, usage: str, schema: type, groups: tuple[str, ...] = ()) -> None:
    """Our own --help (instead of Hydra's, which lists every config group of the package, translation
    included): the groups this command takes, then every key with the value it would have with the
    rest of this command line, and its one-line description (its help in seq2seq/config.py)."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    check_override_keys(argv, schema, groups)
    overrides = [a for a in parse_command_line(argv)[0].overrides if not a.startswith("hydra")]
    with initialize_config_module(version_base="1.3", config_module="seq2seq.configs"):
        composed = compose(command.removeprefix("seq2seq-"), overrides=overrides)
    lines = [f"usage: {command} {usage}", "", "Override any key as key=value (no '+'); --hydra-help: Hydra's options."]
    if groups:
        lines += ["", "groups (group=option):"]
        lines += [f"  {group:<12} {', '.join(group_options(group))}" for group in groups if group_options(group)]
    lines += ["", "keys (default: description):"]
    for key, comment in described_fields(schema):
        value = OmegaConf.select(composed, key)
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        lines.append(f"  {key}={shown}" + (f"  # {comment}" if comment else ""))
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:  # `--help | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (nothing left to flush at exit)


def print_key_help(command: str, usage: str, schema: type) -> None:
    """--help for a command without config groups: every key, its default and its description."""
    lines = [f"usage: {command} {usage}", "", "keys (default: description):"]
    for f, (key, comment) in zip(dataclasses.fields(schema), described_fields(schema), strict=True):
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # a list's default: made
        shown = "null" if default is None else str(default).lower() if isinstance(default, bool) else default
        lines.append(f"  {key}={shown}" + (f"  # {comment}" if comment else ""))
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:  # `--help | head`, as print_help
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (nothing left to flush at exit)


def described_fields(schema: type, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, its description) of every key of `schema`, nested configs flattened; the description
    is the field's help (`seq2seq.config.setting`), empty where it has none."""
    rows = []
    for f in dataclasses.fields(schema):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            rows.extend(described_fields(type(default), f"{prefix}{f.name}."))
        else:
            rows.append((prefix + f.name, f.metadata.get("help", "")))
    return rows
