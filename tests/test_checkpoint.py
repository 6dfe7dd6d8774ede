"""Checkpoint files (`seq2seq.artifacts.checkpoint`): crash-safe saving, safe loading (no code from the file
ever runs), clear errors for broken files, random-number-generator state and model rebuilding."""

from __future__ import annotations

import copy
import dataclasses
import errno
import json
import os
import random
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN, compose_config
from numerics import assert_equal

import seq2seq.artifacts.checkpoint as checkpoint
from seq2seq.artifacts.checkpoint import (
    atomic_save,
    load_checkpoint,
    model_from_checkpoint,
)
from seq2seq.artifacts.model_files import read_model_file
from seq2seq.artifacts.path_kind import WEIGHTS_FORMAT
from seq2seq.averaging import average
from seq2seq.cli.train import train
from seq2seq.config import ModelConfig, TrainConfig, UserError
from seq2seq.model.transformer import Transformer
from seq2seq.train.optim import build_optimizer
from seq2seq.train.rng import rng_state, set_rng_state


def sample_payload() -> dict:
    generator = torch.Generator().manual_seed(0)
    return {
        "format": 1,
        "model": {"layer.weight": torch.randn(3, 4, generator=generator), "layer.bias": torch.zeros(3)},
        "step": 17,
        "config": {"model": {"d_model": 8, "dropout": 0.1, "activation": "relu"}, "seed": None, "flag": True},
        "history": [1.5, 2, "text", None, [torch.arange(5), {"deep": torch.ones(2, dtype=torch.bfloat16)}]],
    }


def assert_same(a: object, b: object) -> None:
    """Structural equality, tensors compared by dtype and value."""
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert_equal(a, b, "tensor")
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_atomic_save_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run" / "checkpoints" / "last.pt"  # parent directories are created
    payload = sample_payload()
    atomic_save(payload, path)
    assert_same(load_checkpoint(path), payload)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]


def test_atomic_save_replaces_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    atomic_save(sample_payload(), path)
    newer = {**sample_payload(), "step": 18}
    atomic_save(newer, path)
    assert load_checkpoint(path)["step"] == 18
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def write_marker(path: str) -> None:
    Path(path).write_text("code from the checkpoint ran")


@dataclasses.dataclass
class Custom:
    x: int


class Payload:
    """Unpickling this runs `write_marker`: what a malicious checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return write_marker, (str(self.marker),)


def test_pickled_code_would_run_without_weights_only(tmp_path: Path) -> None:
    """Guards the next test: this file really does run code when unpickled unsafely."""
    marker = tmp_path / "marker"
    torch.save({"format": 1, "model": {}, "evil": Payload(marker)}, tmp_path / "evil.pt")
    torch.load(tmp_path / "evil.pt", weights_only=False)
    assert marker.exists()


def test_load_refuses_pickled_code(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    path = tmp_path / "evil.pt"
    torch.save({"format": 1, "model": {}, "evil": Payload(marker)}, path)
    with pytest.raises(UserError, match=str(path)):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("thing", [write_marker, Custom(1)], ids=["function", "object"])
def test_load_refuses_arbitrary_python_objects(tmp_path: Path, thing: object) -> None:
    path = tmp_path / "object.pt"
    torch.save({"format": 1, "model": {}, "extra": thing}, path)
    with pytest.raises(UserError, match=str(path)):
        load_checkpoint(path)


@pytest.mark.parametrize("thing", [write_marker, Custom(1)], ids=["function", "object"])
def test_a_refused_checkpoint_never_advises_loading_it_unsafely(tmp_path: Path, thing: object) -> None:
    # torch's message advised weights_only=False (or allow-listing the global): code from the file would run.
    path = tmp_path / "object.pt"
    torch.save({"format": 1, "model": {}, "extra": thing}, path)
    with pytest.raises(UserError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a readable checkpoint (truncated or corrupt): Unsupported global: ")
    assert "\n" not in message
    assert not any(word in message for word in ("weights_only", "safe_globals", "allowlist", "trust"))


def test_truncated_checkpoint_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "last.pt"
    atomic_save(sample_payload(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=str(path)):
        load_checkpoint(path)


def test_empty_checkpoint_file_is_a_user_error(tmp_path: Path) -> None:
    # torch.load raises an exception with an empty message here; the message code indexed its first line.
    path = tmp_path / "best.pt"
    path.write_bytes(b"")
    with pytest.raises(
        UserError, match=rf"^{re.escape(str(path))}: not a readable checkpoint \(truncated or corrupt\)"
    ):
        load_checkpoint(path)


def test_garbage_file_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.pt"
    path.write_text("not a checkpoint at all\n")
    with pytest.raises(UserError, match=str(path)):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "content",
    [b"a b c\n", b"j\x04\x95\t\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.", b"\x80\x02}r\x008\xb9"],
    ids=["text", "a damaged pickle", "a cut pickle"],
)
def test_a_file_the_unpickler_chokes_on_is_one_line_saying_what_it_is_not(tmp_path: Path, content: bytes) -> None:
    # torch's weights-only unpickler raised IndexError ("pop from empty list"), KeyError and struct.error
    # for these, which no handler took: a traceback, from init_from=notes.txt or a run's damaged best.pt.
    path = tmp_path / "notes.pt"
    path.write_bytes(content)
    with pytest.raises(UserError) as info:
        load_checkpoint(path)
    assert (
        str(info.value)
        == f"{path}: not a readable checkpoint (truncated or corrupt): not a zip archive, as every checkpoint is"
    )


def test_a_checkpoint_that_cannot_be_read_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "best.pt"
    atomic_save(sample_payload(), path)

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(torch, "load", refused)
    with pytest.raises(UserError, match=rf"^{re.escape(str(path))}: cannot read it \(Permission denied\)$"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    "payload",
    [{"weights": torch.ones(2)}, {"format": 2, "model": {}}, {"format": 1}, [torch.ones(2)]],
    ids=["no-format", "other-format", "no-model", "list"],
)
def test_non_checkpoint_payload_is_a_user_error(tmp_path: Path, payload: object) -> None:
    path = tmp_path / "other.pt"
    torch.save(payload, path)
    with pytest.raises(UserError, match="not a seq2seq checkpoint"):
        load_checkpoint(path)


def test_missing_checkpoint_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "absent.pt")


def failing_save(payload: object, handle: object) -> None:
    """A disk that fills up part-way through the write."""
    handle.write(b"PK\x03\x04 partial checkpoint bytes")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_failed_save_keeps_previous_file_and_leaves_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.pt"
    atomic_save(sample_payload(), path)
    before = path.read_bytes()
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    with pytest.raises(UserError, match=str(path)) as info:
        atomic_save({**sample_payload(), "step": 99}, path)
    assert f"no space left on {tmp_path}" in str(info.value)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["last.pt"]
    assert load_checkpoint(path)["step"] == 17


def test_full_disk_inside_torch_save_says_so_and_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def torch_writer_fails(payload: object, handle: object) -> None:  # what torch.save raises on a full disk
        handle.write(b"PK\x03\x04 partial")
        raise RuntimeError(
            "[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: file write failed"
        )

    path = tmp_path / "checkpoints" / "last.pt"
    atomic_save(sample_payload(), path)
    monkeypatch.setattr(checkpoint.torch, "save", torch_writer_fails)
    with pytest.raises(UserError) as info:
        atomic_save({**sample_payload(), "step": 99}, path)
    monkeypatch.undo()
    assert str(info.value) == (
        f"{path}: could not write checkpoint: no space left on {path.parent}; the previous one is intact"
    )
    assert os.listdir(path.parent) == ["last.pt"]
    assert load_checkpoint(path)["step"] == 17


def test_failed_first_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint.torch, "save", failing_save)
    with pytest.raises(UserError):
        atomic_save(sample_payload(), tmp_path / "best.pt")
    assert os.listdir(tmp_path) == []


def test_interrupted_save_propagates_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(payload: object, handle: object) -> None:
        handle.write(b"partial")
        raise KeyboardInterrupt

    path = tmp_path / "last.pt"
    atomic_save(sample_payload(), path)
    before = path.read_bytes()
    monkeypatch.setattr(checkpoint.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_save(sample_payload(), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["last.pt"]


def draw_everything() -> tuple:
    """Numbers from every generator, including the normal samplers that cache a second value."""
    return (
        [random.random() for _ in range(3)],
        [random.gauss(0.0, 1.0) for _ in range(3)],
        np.random.rand(3).tolist(),
        np.random.standard_normal(3).tolist(),
        torch.rand(3).tolist(),
        torch.randn(3).tolist(),
    )


@pytest.mark.parametrize("through_file", [False, True])
def test_rng_state_round_trip(tmp_path: Path, through_file: bool) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draw_everything()  # three normal draws each: the samplers now hold a cached second value
    assert np.random.get_state()[3] == 1 and random.getstate()[2] is not None
    state = rng_state()
    if through_file:  # as in a real checkpoint: it must survive weights_only loading
        atomic_save({"format": 1, "model": {}, "rng": state}, tmp_path / "rng.pt")
        state = load_checkpoint(tmp_path / "rng.pt")["rng"]
    first = draw_everything()
    draw_everything()  # move every stream on
    set_rng_state(state)
    assert draw_everything() == first


@pytest.mark.parametrize("tie_output", [True, False])
def test_model_from_checkpoint_reproduces_outputs(tmp_path: Path, tie_output: bool) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=2, max_positions=16, tie_output=tie_output
    )
    model = Transformer(cfg, 13, 11, 0)
    with torch.no_grad():  # make every parameter differ from a fresh initialisation
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    model.eval()
    payload = {
        "format": 1,
        "model": model.state_dict(),
        "config": dataclasses.asdict(TrainConfig(model=cfg)),
        "vocab": {"src_size": 13, "tgt_size": 11, "pad_id": 0},
    }
    atomic_save(payload, tmp_path / "model.pt")
    rebuilt = model_from_checkpoint(load_checkpoint(tmp_path / "model.pt")).eval()
    src = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    tgt = torch.tensor([[1, 4, 9, 3], [1, 10, 0, 0]])
    with torch.no_grad():
        assert torch.equal(rebuilt(src, tgt), model(src, tgt))
    assert rebuilt.cfg == cfg
    assert (rebuilt.output.weight is rebuilt.tgt_embed.weight) == tie_output


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_checkpoint_file_mode_follows_the_umask(tmp_path: Path, umask: int) -> None:
    """Regression: mkstemp's 0600 stayed on every checkpoint, whatever the user's umask."""
    previous = os.umask(umask)
    try:
        atomic_save(sample_payload(), tmp_path / "last.pt")
        (tmp_path / "plain.txt").write_text("an ordinary file, made under the same umask")
    finally:
        os.umask(previous)
    mode = stat.S_IMODE((tmp_path / "last.pt").stat().st_mode)
    assert mode == 0o666 & ~umask == stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
    assert os.umask(previous) == previous  # the umask is left as it was


# --- crafted or damaged model files: one line naming the file and what is wrong ----------------------

TINY = ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, max_positions=16)


def tiny_payload() -> dict:
    torch.manual_seed(0)
    return {
        "format": 1,
        "model": Transformer(TINY, 13, 13, 0).state_dict(),
        "config": dataclasses.asdict(TrainConfig(model=TINY)),
        "vocab": {"src_size": 13, "tgt_size": 13, "pad_id": 0},
        "step": 5,
    }


def without(mapping: dict, key: str) -> dict:
    return {k: v for k, v in mapping.items() if k != key}


@pytest.mark.parametrize(
    ("craft", "message"),
    [
        (lambda p: {**p, "model": without(p["model"], "output.weight")}, "has no tensor output.weight"),
        (
            lambda p: {**p, "model": {**p["model"], "src_embed.weight": torch.zeros(13, 8)}},
            "src_embed.weight has shape (13, 8), the config wants (13, 16)",
        ),
        (lambda p: without(p, "config"), "has no model config (config.model)"),
        (
            lambda p: {**p, "config": {"model": {**p["config"]["model"], "heads": 3}}},
            "config error: model.d_model=16: must be divisible by model.heads=3",
        ),
        (
            lambda p: {**p, "config": {"model": {**p["config"]["model"], "d_model": "abc"}}},
            "model.d_model: Value 'abc' of type 'str' could not be converted to Integer",
        ),
        (lambda p: {**p, "vocab": {**p["vocab"], "pad_id": 99999}}, "vocab.pad_id=99999: every seq2seq vocabulary"),
        (lambda p: without(p, "vocab"), "vocab.src_size: missing or not an integer"),
        (
            lambda p: {**p, "model": {n: t.long() for n, t in p["model"].items()}},
            "is a tensor of torch.int64, not of floating-point weights",
        ),
    ],
    ids=["missing-tensor", "wrong-shape", "no-config", "heads-3", "d_model-abc", "pad_id", "no-vocab", "int64"],
)
def test_a_crafted_checkpoint_is_one_line_naming_it(tmp_path: Path, craft, message: str) -> None:
    # Each was a traceback from load_state_dict, build_model or a KeyError (int64: loaded, cast, wrong).
    path = tmp_path / "crafted.pt"
    atomic_save(craft(tiny_payload()), path)
    with pytest.raises(UserError) as info:
        read_model_file(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_reading_a_model_file_looks_at_what_the_path_is_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_checkpoint asked path_kind again after read_model_file had: a second look at a zip's names.
    import seq2seq.artifacts.model_files as model_files
    from seq2seq.artifacts import path_kind

    looks: list[Path] = []

    def counted(path: Path | str) -> path_kind.PathKind:
        looks.append(Path(path))
        return path_kind.path_kind(path)

    monkeypatch.setattr(model_files, "path_kind", counted)
    monkeypatch.setattr(checkpoint, "path_kind", counted)
    path = tmp_path / "model.pt"
    atomic_save(tiny_payload(), path)
    read, payload = read_model_file(path)
    assert read == path and set(payload["model"]) == set(tiny_payload()["model"])
    assert looks == [path]


def write_weights(directory: Path, payload: dict, **model_changes: object) -> Path:
    """A weights export (model.safetensors + config.json) as seq2seq-export writes it, with changes."""
    from safetensors.torch import save_file

    directory.mkdir()
    save_file({n: t.clone() for n, t in payload["model"].items()}, str(directory / "model.safetensors"))
    config = {
        "format": WEIGHTS_FORMAT,
        "model": {**dataclasses.asdict(TINY), **model_changes},
        "vocab": {**payload["vocab"], **model_changes.pop("vocab", {})},
    }
    config["model"].pop("vocab", None)
    (directory / "config.json").write_text(json.dumps(config))
    return directory / "model.safetensors"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(heads=3), "model.d_model=16: must be divisible by model.heads=3"),
        (dict(d_model="abc"), "model.d_model: Value 'abc' of type 'str' could not be converted to Integer"),
        (dict(max_positions=1e8), "model.max_positions: Value '100000000.0' of type 'float' could not be converted"),
        (dict(max_positions=10**8), "model.max_positions=100000000: must be at most 65536"),
        (dict(vocab={"pad_id": 99999}), "vocab.pad_id=99999: every seq2seq vocabulary pads with id 0"),
    ],
    ids=["heads-3", "d_model-abc", "max_positions-float", "max_positions-huge", "pad_id"],
)
def test_a_crafted_weights_config_is_one_line_naming_it(tmp_path: Path, changes: dict, message: str) -> None:
    weights = write_weights(tmp_path / "model", tiny_payload(), **changes)
    with pytest.raises(UserError) as info:
        read_model_file(weights)
    assert str(info.value).startswith(f"{tmp_path / 'model' / 'config.json'}: ") and message in str(info.value)


def test_safetensors_of_integer_tensors_are_refused(tmp_path: Path) -> None:
    # They loaded and translated with a zeroed model: load_state_dict casts int64 to float silently.
    payload = tiny_payload()
    payload["model"] = {name: tensor.long() for name, tensor in payload["model"].items()}
    weights = write_weights(tmp_path / "model", payload)
    with pytest.raises(UserError) as info:
        read_model_file(weights)
    assert str(info.value).startswith(f"{weights}: ")
    assert str(info.value).endswith("is a tensor of torch.int64, not of floating-point weights")


def test_a_directory_where_no_file_can_be_created_is_one_line(tmp_path: Path, monkeypatch) -> None:
    # seq2seq-average on a read-only run: mkstemp ran before the try, so its PermissionError escaped.
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(checkpoint.tempfile, "mkstemp", refuse)
    with pytest.raises(UserError) as info:
        atomic_save({"step": 1}, tmp_path / "averaged.pt")
    assert str(info.value) == (
        f"{tmp_path / 'averaged.pt'}: could not write checkpoint (Permission denied); the previous one is intact"
    )


# What a training checkpoint held when its payload was first given a type, in the order the Trainer
# wrote it: the checkpoints of runs from before then have these keys (TrainingState writes them so).
LAYOUT = (
    "format", "model", "config", "vocab", "step", "data", "optimizer", "scaler", "rng", "best",
    "validations_since_best", "skipped_updates", "metrics", "elapsed_seconds", "validation_minutes",
    "precision_choice", "corpus",
)  # fmt: skip
# What older code did not write yet: the run's clock, the precision record and the corpus files' record.
ADDED_LATER = ("elapsed_seconds", "validation_minutes", "precision_choice", "corpus")


def training_payload_by_hand() -> dict:
    """A training checkpoint's payload in the layout the Trainer has written since FORMAT 1 got its
    type, built here key by key rather than by the code under test."""
    generator = torch.Generator().manual_seed(5)
    weight = torch.randn(3, 4, generator=generator)
    return {
        "format": 1,
        "model": {"layer.weight": weight},
        "config": {"model": {"d_model": 4}, "seed": 1, "precision": "fp32"},
        "vocab": {"src_size": 13, "tgt_size": 13, "pad_id": 0, "tokenizer": "abc"},
        "step": 3,
        "data": {"epoch": 0, "position": 24},
        "optimizer": {
            "updates": 3,
            "state": {0: {"step": 3, "exp_avg": torch.ones(3, 4), "exp_avg_sq": torch.full((3, 4), 2.0)}},
        },
        "scaler": {},
        "rng": [rng_state()],
        "best": {"value": 12.5, "step": 2},
        "validations_since_best": 1,
        "skipped_updates": 0,
        "metrics": {"bleu": 11.0, "loss": 2.5},
        "elapsed_seconds": 61.5,
        "validation_minutes": 0.25,
        "precision_choice": {"asked": "auto", "reason": "bf16 was no faster here"},
        "corpus": [{"path": "/data/train.de", "bytes": 12, "sha256": "0" * 64}],
    }


def test_a_payload_of_todays_layout_loads_as_a_training_state_and_is_written_back_alike(tmp_path: Path) -> None:
    payload = training_payload_by_hand()
    torch.save(payload, tmp_path / "last.pt")  # as the Trainer wrote it before TrainingState
    state = checkpoint.load_training_state(tmp_path / "last.pt")
    assert isinstance(state, checkpoint.TrainingState)
    for key in LAYOUT[1:]:
        assert_same(getattr(state, key), payload[key])
    assert tuple(state.to_payload()) == LAYOUT
    checkpoint.save_training_state(state, tmp_path / "again.pt")
    assert_same(torch.load(tmp_path / "again.pt", weights_only=True), payload)


def test_a_payload_without_what_later_code_added_is_upgraded_as_it_is_read(tmp_path: Path) -> None:
    """The keys older checkpoints lack, each filled in by `upgrade` alone: one random state as a dict,
    without numpy's cached normal draw; a torch.optim optimizer state (no "updates", its steps as
    tensors); no clock and no precision record."""
    np.random.seed(4)
    np.random.rand(2)  # no normal draw: nothing is cached, as in a state saved without the cache
    payload = training_payload_by_hand()
    rng = rng_state()
    expected_draws = np.random.rand(3).tolist()
    old_rng = {**rng, "numpy": {k: v for k, v in rng["numpy"].items() if k not in ("has_gauss", "cached_gaussian")}}
    payload["rng"] = old_rng
    payload["optimizer"] = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(3, 4), "exp_avg_sq": torch.ones(3, 4)}},
        "param_groups": [{"lr": 0.001, "betas": (0.9, 0.98), "params": [0]}],
    }
    for key in ADDED_LATER:
        del payload[key]
    torch.save(payload, tmp_path / "last.pt")
    before = copy.deepcopy(payload)
    assert checkpoint.upgrade(payload)["optimizer"]["updates"] == 3
    assert_same(payload, before)  # the upgrade changed a copy
    state = checkpoint.load_training_state(tmp_path / "last.pt")
    assert (state.elapsed_seconds, state.validation_minutes, state.precision_choice) == (0.0, 0.0, None)
    assert state.corpus is None  # not recorded: a resume cannot check it
    assert state.optimizer["updates"] == 3
    assert len(state.rng) == 1
    assert (state.rng[0]["numpy"]["has_gauss"], state.rng[0]["numpy"]["cached_gaussian"]) == (0, 0.0)
    np.random.seed(99)
    set_rng_state(state.rng[0])
    assert np.random.rand(3).tolist() == expected_draws
    param = torch.nn.Parameter(torch.zeros(3, 4))
    optimizer = build_optimizer([param], TrainConfig().optim, 4)
    optimizer.load_state_dict(state.optimizer)
    assert optimizer.updates == 3


def test_an_averaged_checkpoint_is_not_a_training_state(tmp_path: Path) -> None:
    payload = training_payload_by_hand()
    averaged = {key: payload[key] for key in ("format", "config", "vocab", "step", "metrics", "model")}
    averaged |= {"averaged_from": ["a.pt", "b.pt"], "averaged_steps": [2, 3]}
    atomic_save(averaged, tmp_path / "averaged.pt")
    assert_same(load_checkpoint(tmp_path / "averaged.pt"), averaged)  # nothing added by the upgrade
    with pytest.raises(UserError) as info:
        checkpoint.load_training_state(tmp_path / "averaged.pt")
    assert str(info.value) == (
        f"{tmp_path / 'averaged.pt'}: has no data (not a training checkpoint: a run cannot resume from it)"
    )


def test_checkpoints_of_the_layout_runs_have_written_load_resume_and_average(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=4"]), run)
    last = run / "checkpoints" / "last.pt"
    payload = load_checkpoint(last)
    assert tuple(payload) == LAYOUT
    assert tuple(torch.load(last, weights_only=True)) == LAYOUT  # on disk too, before any upgrade
    assert set(payload["vocab"]) == {"src_size", "tgt_size", "pad_id", "tokenizer"}
    # The checkpoint, and the weights export training wrote from best.pt at its end, rebuild their models.
    for source, made_from in ((last, last), (run / "model", run / "checkpoints" / "best.pt")):
        _, model_payload = read_model_file(source)
        assert checkpoint.ModelPayload.__required_keys__ <= set(model_payload)
        weights = load_checkpoint(made_from)["model"]
        for name, tensor in model_from_checkpoint(model_payload).state_dict().items():
            assert_equal(tensor, weights[name], name)
    averaged = average([run / "checkpoints" / "step_4.pt", last])
    assert tuple(averaged) == (
        "format",
        "config",
        "vocab",
        "step",
        "metrics",
        "model",
        "averaged_from",
        "averaged_steps",
    )
    # Older still: written before the run's clock, the precision record, the tokenizer's fingerprint,
    # per-rank random states, numpy's cached draw and our own optimizer state were kept.
    older = {key: value for key, value in payload.items() if key not in ADDED_LATER}
    older["vocab"] = {key: value for key, value in payload["vocab"].items() if key != "tokenizer"}
    older["rng"] = {**payload["rng"][0], "numpy": {"keys": payload["rng"][0]["numpy"]["keys"], "pos": 0}}
    older["optimizer"] = {"state": payload["optimizer"]["state"]}
    atomic_save(older, last)
    read_model_file(last)
    resume = f"resume={run}"
    summary = train(
        compose_config("train", [*TINY_TRAIN, resume, "max_steps=6"]), run, overrides=[resume, "max_steps=6"]
    )
    assert summary["step"] == 6
