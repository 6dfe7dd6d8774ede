"""Saving and loading checkpoints, crash-safe, and rebuilding a model from one.

A checkpoint is a dict of tensors and plain Python values only, so it loads with
`torch.load(weights_only=True)`: loading never runs code from the file. It carries the resolved
config, so a checkpoint (with its tokenizer) is all translation needs. A training checkpoint is a
`TrainingState` written as such a dict; `upgrade` brings a payload that older code wrote to today's
layout, once, as it is read, so no reader keeps a default for a key older files lack.
"""

# No `from __future__ import annotations` here: the payload types below are read at run time
# (`__required_keys__`, `dataclasses.fields`), which needs their annotations evaluated.
import dataclasses
import errno
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import torch

from seq2seq.artifacts.path_kind import PathKind, argos_package_error, path_kind
from seq2seq.artifacts.replacing import fsync_directory, temporary_affixes
from seq2seq.config import ModelConfig, UserError, validate_model
from seq2seq.data.tokenizer import PAD_ID, SPECIALS, Tokenizers
from seq2seq.model.transformer import Transformer, build_model

FORMAT = 1
ZIP_MAGIC = b"PK\x03\x04"  # how a zip archive begins, as every checkpoint does (torch.save's format)
SPECIAL_TOKENS = len(SPECIALS)


# ---- what a checkpoint holds ------------------------------------------------------------------
# Plain dicts on disk (torch.load(weights_only=True) reads nothing else). A training checkpoint is
# written and read as a TrainingState; the model payload that every model file gives (a checkpoint, a
# weights export, an imported Marian model) is a dict whose keys ModelPayload names.


class Vocabulary(TypedDict):
    """The vocabularies the embeddings were sized for."""

    src_size: int
    tgt_size: int
    pad_id: int
    # The tokenizer's fingerprint: translation checks that the tokenizer beside the checkpoint is this
    # one. Absent from checkpoints written before it was kept, and from imported Marian models.
    tokenizer: NotRequired[str]


class ModelPayload(TypedDict):
    """What rebuilding the model needs (`model_from_checkpoint`): all that a weights-only export
    (`load_weights`) or an imported Marian model holds."""

    format: int  # FORMAT
    model: dict[str, torch.Tensor]  # the model's state_dict
    config: dict[str, Any]  # the run's resolved config as a plain dict; translation reads config["model"]
    vocab: Vocabulary
    step: int  # updates made; -1 where a weights export does not say


class PrecisionRecord(TypedDict):
    asked: str  # what the run's command line said (e.g. auto)
    reason: str  # why it computes in config["precision"]


@dataclasses.dataclass
class TrainingState:
    """A training checkpoint: the model, and everything a run needs to continue bit-for-bit. The file
    holds it as a dict of its fields (and "format"), in this order."""

    model: dict[str, torch.Tensor]  # the model's state_dict
    config: dict[str, Any]  # the run's resolved config, with the precision it computes in
    vocab: Vocabulary
    step: int  # updates made
    data: dict[str, Any]  # the batch stream's (epoch, position)
    optimizer: dict[str, Any]  # with the learning-rate schedule's state
    scaler: dict[str, Any]  # the fp16 grad scaler's; empty when it is off
    rng: list[dict[str, Any]]  # every rank's random state, in rank order
    best: dict[str, float] | None  # {"value", "step"} of best_metric; None before the first validation
    validations_since_best: int
    skipped_updates: int
    metrics: dict[str, float]  # of the latest validation
    elapsed_seconds: float  # training time over every segment of the run
    validation_minutes: float  # the latest validation's duration, kept back from max_minutes
    precision_choice: PrecisionRecord | None  # None: the checkpoint predates the record
    corpus: list[dict[str, Any]] | None  # the files trained on: path, bytes, sha256; None: predates the record

    def to_payload(self) -> dict[str, Any]:
        """The dict the file holds (its values shared, not copied: a model's tensors are large)."""
        return {"format": FORMAT, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], where: Path) -> "TrainingState":
        """A checkpoint's payload (as `load_checkpoint` gives it: upgraded) as a TrainingState; one line
        naming the file and the key when it lacks a part of the training state (an averaged checkpoint)."""
        for field in dataclasses.fields(cls):
            if field.name not in payload:
                raise UserError(
                    f"{where}: has no {field.name} (not a training checkpoint: a run cannot resume from it)"
                )
        return cls(**{f.name: payload[f.name] for f in dataclasses.fields(cls)})


class AveragedCheckpoint(ModelPayload):
    """The mean of several checkpoints' weights, for translation: the newest one's model payload with
    the averaged weights, no training state."""

    metrics: NotRequired[dict[str, float]]  # the newest checkpoint's
    averaged_from: list[str]  # the files averaged
    averaged_steps: list[int]  # their updates, in the same order


def upgrade(payload: dict[str, Any]) -> dict[str, Any]:
    """A training checkpoint's payload as today's code writes it, from one that older code wrote (the
    format stayed 1: each change only added what older files lack). Returns a new dict; `payload` and
    what it holds are left as they were. A payload without training state (an averaged checkpoint, a
    model export's) is returned as it is; a part of another shape than any version wrote is left for
    `TrainingState.from_payload` and the Trainer to refuse."""
    if "optimizer" not in payload:
        return payload
    upgraded = dict(payload)
    rng = payload.get("rng")
    if isinstance(rng, dict):  # before each rank's random state was kept: the one process's
        rng = [rng]
    if isinstance(rng, list) and all(isinstance(state, dict) and isinstance(state.get("numpy"), dict) for state in rng):
        # Before numpy's cached normal draw was kept: none cached.
        upgraded["rng"] = [{**s, "numpy": {"has_gauss": 0, "cached_gaussian": 0.0, **s["numpy"]}} for s in rng]
    optimizer = payload["optimizer"]
    if isinstance(optimizer, dict) and "updates" not in optimizer and isinstance(optimizer.get("state"), dict):
        # A torch.optim Adam/AdamW state dict (before the optimizer was ours): its updates are its steps.
        updates = max((int(s["step"]) for s in optimizer["state"].values()), default=0)
        upgraded["optimizer"] = {**optimizer, "updates": updates}
    # Before the run's clock and the precision record were kept: a resume starts them afresh.
    upgraded.setdefault("elapsed_seconds", 0.0)
    upgraded.setdefault("validation_minutes", 0.0)
    upgraded.setdefault("precision_choice", None)
    upgraded.setdefault("corpus", None)  # before the corpus files were recorded: a resume cannot check them
    return upgraded


def atomic_save(payload: Mapping[str, Any], path: Path) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over `path`: a crash or a
    full disk at any moment leaves either the old file or the new one, never half of one."""
    tmp_name = None
    try:
        # Inside the try: a read-only directory is the same one-line error as a failed write.
        path.parent.mkdir(parents=True, exist_ok=True)
        prefix, suffix = temporary_affixes(path)
        fd, tmp_name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes it 0600; a checkpoint is an ordinary file
        with os.fdopen(fd, "wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
        fsync_directory(path.parent)
    except BaseException as err:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        if _is_disk_full(err):
            raise UserError(
                f"{path}: could not write checkpoint: no space left on {path.parent}; the previous one is intact"
            ) from err
        if isinstance(err, OSError):
            raise UserError(
                f"{path}: could not write checkpoint ({err.strerror or err}); the previous one is intact"
            ) from err
        raise


def current_umask() -> int:
    """The process's umask, for files made with mkstemp (0600) that should be ordinary files."""
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


def _is_disk_full(err: BaseException) -> bool:
    """torch.save reports a failed write as RuntimeError("[enforce fail at inline_container.cc...] ...
    file write failed"), without the errno; a full disk is by far the likeliest cause."""
    if isinstance(err, OSError):
        return err.errno == errno.ENOSPC
    return isinstance(err, RuntimeError) and "inline_container" in str(err)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint file's payload, read without running code from it and upgraded to today's layout
    (`upgrade`). Checked here: its format and that it has weights; its model payload where a model is
    built from it (`read_model_file`), its training state where a run resumes from it
    (`load_training_state`). An averaged checkpoint has no training state."""
    path = Path(path)
    if path_kind(path) is PathKind.ARGOS:  # a zip too: torch.load would call it a corrupt checkpoint
        raise argos_package_error(path)
    return read_checkpoint_file(path)


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """`load_checkpoint` of a path already known to be no Argos package (`read_model_file` looked)."""
    if not path.is_file():
        raise UserError(f"{path}: no such checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as err:
        raise UserError(f"{path}: cannot read it ({err.strerror or err})") from err
    except Exception as err:  # on bytes that are no checkpoint the unpickler raises whatever it meets
        raise UserError(
            f"{path}: not a readable checkpoint (truncated or corrupt): {_load_failure(err, path)}"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or "model" not in payload:
        raise UserError(f"{path}: not a seq2seq checkpoint (format {FORMAT})")
    return upgrade(payload)


def load_training_state(path: str | Path) -> TrainingState:
    """What a run resumes from: a training checkpoint, read and upgraded."""
    return TrainingState.from_payload(load_checkpoint(path), Path(path))


def save_training_state(state: TrainingState, path: Path) -> None:
    atomic_save(state.to_payload(), path)


def _load_failure(err: BaseException, path: Path) -> str:
    """What torch.load said went wrong, in one sentence, without its advice: for a file its weights-only
    loader refuses, torch suggests weights_only=False or allow-listing the global, which would run code
    from a damaged or crafted file. A file that is no zip archive, as every checkpoint is (torch.save's
    format since torch 1.6), is told so: the unpickler's own words for it ("pop from empty list",
    "invalid load key") say nothing to the user."""
    try:
        with path.open("rb") as file:
            head = file.read(len(ZIP_MAGIC))
    except OSError:  # gone since torch opened it: torch's own words, below
        head = ZIP_MAGIC
    if not head:
        return "the file is empty"
    if head != ZIP_MAGIC:
        return "not a zip archive, as every checkpoint is"
    text = str(err)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1]
        text = text.split(" was not an allowed global", 1)[0]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    sentence = lines[0].split(". ", 1)[0].rstrip(".") if lines else ""
    unsafe = ("weights_only", "safe_globals", "allowlist")
    # An empty file gives an exception with an empty message: name its type instead.
    return sentence if sentence and not any(word in sentence for word in unsafe) else type(err).__name__


def checkpoint_keys(path: Path) -> frozenset[str] | None:
    """The top-level keys of a checkpoint this tool wrote (its format key), or None for any other file;
    told without reading its tensors: they are memory-mapped, not loaded, so a large checkpoint costs no
    more than a small one."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # anything unreadable as a checkpoint is not one, whatever torch raises for it
        return None
    own = isinstance(payload, dict) and payload.get("format") == FORMAT and "model" in payload
    return frozenset(payload) if own else None


def is_checkpoint_file(path: Path, training: bool = False) -> bool:
    """Whether `path` is a checkpoint this tool wrote, with the state a run resumes from if `training`."""
    keys = checkpoint_keys(path)
    return keys is not None and (not training or "optimizer" in keys)


def model_config_of(stored: Any, where: Path) -> ModelConfig:
    """The model config stored in a checkpoint or a weights config.json, checked as the schema checks a
    YAML file (known keys, types), then as training checks it (validate_model): a crafted or damaged
    file is one line naming it and the key, not a traceback from inside the model."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(stored, dict):
        raise UserError(f"{where}: has no model config (config.model)")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    for key in stored:
        if key not in known:
            raise UserError(f"{where}: model.{key}: not a setting this version knows")
    try:
        model_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), stored))
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "?"
        raise UserError(f"{where}: model.{key}: {str(err).strip().splitlines()[0]}") from err
    try:
        validate_model(model_cfg)
    except UserError as err:
        raise UserError(f"{where}: {err}") from err
    return model_cfg


def _check_vocab_entries(vocab: dict[str, Any], where: Path) -> None:
    for key in ("src_size", "tgt_size", "pad_id"):
        if not isinstance(vocab.get(key), int) or isinstance(vocab.get(key), bool):
            raise UserError(f"{where}: vocab.{key}: missing or not an integer")
    if vocab["src_size"] <= SPECIAL_TOKENS or vocab["tgt_size"] <= SPECIAL_TOKENS:
        raise UserError(f"{where}: vocab sizes {vocab['src_size']}/{vocab['tgt_size']}: too small for a vocabulary")
    if vocab["pad_id"] != PAD_ID:
        raise UserError(f"{where}: vocab.pad_id={vocab['pad_id']}: every seq2seq vocabulary pads with id {PAD_ID}")


def check_vocabulary(payload: ModelPayload, tokenizers: Tokenizers, path: Path) -> None:
    """The tokenizer found beside a checkpoint must be the one it was trained with: the same sizes,
    and the same tokenizer where the checkpoint records it (another run's of the same size would
    translate without complaint, every id meaning another token)."""
    vocab = payload["vocab"]
    sizes = (tokenizers.src.get_vocab_size(), tokenizers.tgt.get_vocab_size())
    if sizes != (vocab["src_size"], vocab["tgt_size"]):
        raise UserError(
            f"{path}: the checkpoint was trained with vocabularies of {vocab['src_size']}/{vocab['tgt_size']} "
            f"entries but the tokenizer beside it has {sizes[0]}/{sizes[1]}: they belong to different runs"
        )
    if vocab.get("tokenizer") not in (None, tokenizers.fingerprint()):
        raise UserError(
            f"{path}: the tokenizer beside it is not the one it was trained with (same size, other tokens): "
            "they belong to different runs"
        )


def model_from_checkpoint(payload: ModelPayload) -> Transformer:
    """Rebuilds the model from the config stored in the checkpoint and loads its weights."""
    model_cfg = ModelConfig(**payload["config"]["model"])
    vocab = payload["vocab"]
    model = build_model(model_cfg, vocab["src_size"], vocab["tgt_size"], vocab["pad_id"])
    model.load_state_dict(payload["model"])
    return model


def _check_weights(state: dict[str, torch.Tensor], model_cfg: ModelConfig, vocab: dict[str, int], path: Path) -> None:
    """Names and shapes against the model the config describes. Built on the CPU, not on "meta": there
    its weight initialisers go through torch's decompositions, which import torch._dynamo (seconds of
    start-up; the CPU build costs a small part of that: docs/performance.md). Its random initialisation
    must not move the caller's random state (init_from= then trains exactly as from the checkpoint)."""
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise UserError(f"{path}: its weights are not a dict of tensors")
    with torch.random.fork_rng(devices=[]):
        expected = build_model(model_cfg, vocab["src_size"], vocab["tgt_size"], vocab["pad_id"]).state_dict()
    for name, tensor in expected.items():
        if name not in state:
            raise UserError(f"{path}: has no tensor {name}")
        if tuple(state[name].shape) != tuple(tensor.shape):
            raise UserError(
                f"{path}: {name} has shape {tuple(state[name].shape)}, the config wants {tuple(tensor.shape)}"
            )
        if not state[name].is_floating_point():  # load_state_dict would cast int64 weights without a word
            raise UserError(f"{path}: {name} is a tensor of {state[name].dtype}, not of floating-point weights")
    for name in state:
        if name not in expected:
            raise UserError(f"{path}: {name}: a tensor the model does not have")
