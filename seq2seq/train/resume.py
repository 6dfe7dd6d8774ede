"""resume=: what a resumed run may change of the run it continues, and what it may not.

A resumed run is its checkpoint's run: its saved config, with the command line's key overrides on top
(max_steps=, max_minutes=, ...). A data.* or model.* key a resume cannot honour (the model's shape, the
vocabulary, the filters, the corpus's kind and languages) is refused, each key named with both values;
the few a resume honours are RESUMABLE_KEYS. The corpus files are checked by content: a file replaced
since the run started is refused by name (the checkpoint records each file's size and SHA-256), since
training on from a data position and a vocabulary made for another text is another run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from seq2seq.config import TRAIN_GROUPS, TrainConfig, UserError, typed_dotlist
from seq2seq.data.directions import check_same_directions

log = logging.getLogger("seq2seq.train")

# The data.* keys that name a corpus file (data.dir names Multi30k's folder).
CORPUS_FILE_KEYS = (
    *(f"{split}_{side}" for split in ("train", "valid", "test") for side in ("src", "tgt")),
    "train",
    "valid",
    "test",
)
# The data.* keys a resume honours; every other data.* and model.* key must stay as the run started
# (tests/test_resume.py walks the schema against this list). No model.* key: the checkpoint's weights
# are of its model.
RESUMABLE_KEYS = frozenset(
    {
        # Where the tokenized data are kept, not what they are: built there again from the same files.
        "data.cache_dir",
        # Where the corpus lies (it may have moved): check_same_corpus holds the files read there to the
        # ones the run started on, byte for byte.
        "data.dir",
        *(f"data.{key}" for key in CORPUS_FILE_KEYS),
    }
)
CHECKED_GROUPS = ("data", "model")


def resumed_config(resume: str, overrides: list[str], saved: dict[str, Any]) -> DictConfig:
    """The saved config of the run directory `resume`, with the command line's key overrides on top; a
    group override (model=small) or a data.*/model.* key the resume cannot honour is refused in one line."""
    keys = []
    for override in overrides:
        key = override.lstrip("+").split("=", 1)[0]
        if key in TRAIN_GROUPS or override.startswith("~"):
            raise UserError(
                f"resume: '{override}' would change the run being resumed; use init_from=<checkpoint> for a new run"
            )
        if key != "resume":
            keys.append(override.lstrip("+"))
    # The saved config on the schema (keys newer than the checkpoint at their defaults), then the overrides.
    started = OmegaConf.merge(OmegaConf.structured(TrainConfig), saved)
    merged = OmegaConf.merge(started, typed_dotlist(keys, TrainConfig))
    merged.resume = resume
    merged.init_from = None  # the weights come from the checkpoint now, not from where the run started
    check_same_directions(saved["data"], merged.data)  # a multilingual run keeps its directions and tags
    changed = [line for group in CHECKED_GROUPS for line in differences(group, started[group], merged[group])]
    if changed:
        raise UserError(
            f"resume: {resume} trains as it started, not with {'; '.join(changed)} "
            f"(drop {'it' if len(changed) == 1 else 'them'}, or start a new run with init_from={resume})"
        )
    return merged


def differences(group: str, started: DictConfig, given: DictConfig) -> list[str]:
    """Each key of `group` outside RESUMABLE_KEYS whose value the command line changes, both values."""
    before, after = _flat(OmegaConf.to_container(started)), _flat(OmegaConf.to_container(given))
    return [
        f"{group}.{key}: {_shown(before[key])} in the checkpoint, {_shown(after.get(key))} given"
        for key in before
        if f"{group}.{key}" not in RESUMABLE_KEYS and _plain(before[key]) != _plain(after.get(key))
    ]


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested section's keys by their dotted names (data.clean_settings.max_chars), so each is named."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _plain(value: Any) -> Any:
    """A value as compared: an empty list is no list (data.directions=[] means null)."""
    return None if value == [] else value


def _shown(value: Any) -> str:
    """A value as a command line writes it: false, null, [en-de,en-fr]."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"[{','.join(_shown(item) for item in value)}]"
    return str(value)


def check_same_corpus(
    recorded: list[dict[str, Any]] | None, now: Sequence[dict[str, Any]], data: DictConfig, run: str
) -> None:
    """The files `data` reads (`now`, its corpus plan's, by content) are those the run started on
    (`recorded`, from its checkpoint); else one line naming the file that differs. A checkpoint older
    than the record: unchecked."""
    if recorded is None:
        log.info("resume: %s predates the record of its corpus files: they are not checked", run)
        return
    new_run = f"start a new run with init_from={run}"
    if len(now) != len(recorded):
        raise UserError(
            f"resume: the corpus is read from {len(now)} files now, from {len(recorded)} when {run} started: "
            f"a resumed run trains on the corpus it started with (give its files, or {new_run})"
        )
    for then, current in zip(recorded, now, strict=True):
        if (then["bytes"], then["sha256"]) != (current["bytes"], current["sha256"]):
            what = (
                "cannot be read now"
                if current["sha256"] is None
                else f"now {current['bytes']} bytes, sha256 {current['sha256'][:12]}"
            )
            raise UserError(
                f"resume: {current['path']}{_named_by(data, current['path'])} is not the file {run} started on "
                f"({then['bytes']} bytes, sha256 {then['sha256'][:12]} then; {what}): a resumed run trains on the "
                f"corpus it started with (put that file back, or {new_run})"
            )


def _named_by(data: DictConfig, path: str) -> str:
    """ " (data.KEY)": the key whose value is `path`; " (in data.dir=...)" for Multi30k's files; else nothing."""
    for key in CORPUS_FILE_KEYS:
        if (value := data.get(key)) and Path(value).resolve() == Path(path):
            return f" (data.{key})"
    return f" (in data.dir={data.dir})" if data.kind == "multi30k" and data.dir else ""
