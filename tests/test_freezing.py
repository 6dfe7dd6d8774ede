"""freeze= and trainable_top_layers=: the parts a fine-tuning run leaves as they came."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.cli.train import train
from seq2seq.config import ConfigValueError, ModelConfig, validate_train
from seq2seq.model.transformer import build_model
from seq2seq.train.freezing import frozen_names

TRAIN = [*TINY_TRAIN, "max_steps=3", "valid_every=3", "save_every=3", "data.task_train_size=200"]


def tiny_model() -> torch.nn.Module:
    cfg = ModelConfig(d_model=16, heads=2, ffn_dim=32, encoder_layers=2, decoder_layers=2, norm_first=True)
    return build_model(cfg, 40, 40, 0)


def test_the_names_each_option_freezes() -> None:
    model = tiny_model()
    stacks = lambda names: sorted({".".join(n.split(".")[:2]) if "layers" in n else n.split(".")[0] for n in names})  # noqa: E731
    assert stacks(frozen_names(model, ["embeddings"], None)) == ["src_embed", "tgt_embed"]
    assert stacks(frozen_names(model, ["encoder"], None)) == ["encoder_layers.0", "encoder_layers.1", "encoder_norm"]
    # All but the top layer of each stack, and the embeddings; the final norms train with the top layers.
    assert stacks(frozen_names(model, [], 1)) == ["decoder_layers.0", "encoder_layers.0", "src_embed", "tgt_embed"]
    assert frozen_names(model, [], None) == []


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("freezing")
    train_logging(compose_config("train", [*TRAIN, f"data.cache_dir={root / 'cache'}"]), root / "run")
    return root / "run"


def test_a_frozen_encoder_comes_out_as_it_went_in(first_run: Path, tmp_path: Path) -> None:
    cache = first_run.parent / "cache"
    overrides = [*TRAIN, f"data.cache_dir={cache}", f"init_from={first_run}", "freeze=[encoder,embeddings]"]
    train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    before = load_checkpoint(first_run / "checkpoints" / "best.pt")["model"]
    after = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["model"]
    kept = [k for k in before if k.startswith(("encoder_", "src_embed", "tgt_embed", "output."))]
    trained = [k for k in before if k.startswith("decoder_layers")]
    assert kept and all(torch.equal(before[k], after[k]) for k in kept)
    assert any(not torch.equal(before[k], after[k]) for k in trained)


@pytest.mark.parametrize(
    ("override", "key"), [("freeze=[everything]", "freeze"), ("trainable_top_layers=99", "trainable_top_layers")]
)
def test_a_bad_value_is_one_line(override: str, key: str) -> None:
    with pytest.raises(ConfigValueError, match=rf"^config error: {key}="):
        validate_train(compose_config("train", [*TRAIN, override]))


@pytest.mark.parametrize(
    "overrides",
    [["freeze=[embeddings,encoder,decoder]"], ["freeze=[encoder,decoder]", "trainable_top_layers=1"]],
    ids=["all three", "both stacks and the embeddings by trainable_top_layers"],
)
def test_freezing_every_weight_is_refused_before_the_run(overrides: list[str]) -> None:
    # It trained on until the first backward: "element 0 of tensors does not require grad", a traceback.
    with pytest.raises(
        ConfigValueError, match=r"^config error: freeze=.*: freezes every weight, so nothing would train"
    ):
        validate_train(compose_config("train", [*TRAIN, *overrides]))
    validate_train(compose_config("train", [*TRAIN, "freeze=[encoder,decoder]"]))  # the embeddings train
