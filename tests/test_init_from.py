"""init_from= names where a new run's weights come from: a run directory, a checkpoint, a weights
export, a Marian model; anything else is one line naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config, train_logging

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.cli.train import train
from seq2seq.config import UserError

TRAIN = [*TINY_TRAIN, "max_steps=4", "valid_every=4", "save_every=4", "data.task_train_size=200"]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("init_from")
    train_logging(compose_config("train", [*TRAIN, f"data.cache_dir={root / 'cache'}"]), root / "run")
    return root / "run"


def test_a_run_directory_starts_a_new_run_from_its_model(first_run: Path, tmp_path: Path) -> None:
    # It said "no such checkpoint file": a run directory is what training leaves, and what users give.
    cache = first_run.parent / "cache"
    cfg = compose_config("train", [*TRAIN, "max_steps=1", f"data.cache_dir={cache}", f"init_from={first_run}"])
    seen = {}
    import seq2seq.train.command as run

    real = run.init_weights_from

    def recording(model, *args):
        real(model, *args)
        seen.update({k: v.clone() for k, v in model.state_dict().items()})

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "init_weights_from", recording)
        train(cfg, tmp_path / "second")
    best = load_checkpoint(first_run / "checkpoints" / "best.pt")["model"]
    assert seen.keys() == best.keys() and all(torch.equal(seen[k], best[k]) for k in best)


def test_a_directory_without_a_model_is_one_line(first_run: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = compose_config("train", [*TRAIN, f"data.cache_dir={first_run.parent / 'cache'}", f"init_from={empty}"])
    with pytest.raises(UserError) as info:
        train(cfg, tmp_path / "run")
    assert str(info.value).startswith(f"init_from={empty}: a directory with no model in it")


def test_a_directory_without_a_model_is_refused_before_the_corpus_is_tokenized(tmp_path: Path) -> None:
    # The run's plan locates init_from='s weights; it was found out only after the data were prepared.
    empty, cache = tmp_path / "empty", tmp_path / "cache"
    empty.mkdir()
    cfg = compose_config("train", [*TRAIN, f"data.cache_dir={cache}", f"init_from={empty}"])
    with pytest.raises(UserError, match="a directory with no model in it"):
        train(cfg, tmp_path / "run")
    assert not cache.exists() or not any(cache.iterdir())


def test_a_model_of_another_shape_names_each_key_that_differs(first_run: Path, tmp_path: Path) -> None:
    # It said "its model config differs from model.* of this run" and left the user to guess which key.
    cache = first_run.parent / "cache"
    overrides = ["model.d_model=32", "model.ffn_dim=64", f"data.cache_dir={cache}", f"init_from={first_run}"]
    cfg = compose_config("train", [*TRAIN, *overrides])
    theirs = load_checkpoint(first_run / "checkpoints" / "best.pt")["config"]["model"]
    with pytest.raises(UserError) as info:
        train(cfg, tmp_path / "run")
    expected = [
        f"model.{key}: {theirs[key]} in init_from, {value} here" for key, value in [("d_model", 32), ("ffn_dim", 64)]
    ]
    assert str(info.value) == (
        f"init_from={first_run}: its model config differs from model.* of this run: {'; '.join(expected)}"
    )


def test_a_model_of_another_shape_is_refused_before_the_corpus_is_tokenized(first_run: Path, tmp_path: Path) -> None:
    # The weights were read, and their shape compared, only after the data were prepared: minutes lost.
    cache = tmp_path / "cache"
    overrides = ["model.d_model=32", "model.ffn_dim=64", f"data.cache_dir={cache}", f"init_from={first_run}"]
    with pytest.raises(UserError, match="its model config differs from model.\\* of this run"):
        train(compose_config("train", [*TRAIN, *overrides]), tmp_path / "run")
    assert not cache.exists() or not any(cache.iterdir())


def test_an_unreadable_checkpoint_is_refused_before_the_corpus_is_tokenized(tmp_path: Path) -> None:
    broken, cache = tmp_path / "broken.pt", tmp_path / "cache"
    broken.write_bytes(b"not a checkpoint")
    cfg = compose_config("train", [*TRAIN, f"data.cache_dir={cache}", f"init_from={broken}"])
    with pytest.raises(UserError, match=str(broken)):
        train(cfg, tmp_path / "run")
    assert not cache.exists() or not any(cache.iterdir())


def test_the_plan_holds_no_weights_once_the_model_has_them(first_run: Path, tmp_path: Path) -> None:
    # The plan reads init_from='s weights before the corpus; kept there, a pretrained model would sit
    # in memory twice for the whole run.
    from seq2seq.train.plan import plan_run

    cache = first_run.parent / "cache"
    cfg = compose_config("train", [*TRAIN, "max_steps=1", f"data.cache_dir={cache}", f"init_from={first_run}"])
    plan = plan_run(cfg, tmp_path / "run", [])
    assert plan.init_from is not None and plan.init_from.payload is not None
    import seq2seq.train.command as run
    from seq2seq.train.run_outputs import BeforeStart

    run.train(plan, BeforeStart.of(tmp_path / "run"))
    assert plan.init_from.payload is None


def test_a_named_recipe_of_another_shape_is_refused_before_the_corpus_is_tokenized(
    first_run: Path, tmp_path: Path
) -> None:
    # recipe=<name> fixes the model as recipe=fixed does: its overrides are applied in the plan.
    cache = tmp_path / "cache"
    named = [
        "recipe=narrow",
        "recipes=[{name: narrow, overrides: ['model.d_model=32', 'model.ffn_dim=64']}]",
        f"data.cache_dir={cache}",
        f"init_from={first_run}",
    ]
    with pytest.raises(UserError, match="model.d_model: .* in init_from, 32 here"):
        train(compose_config("train", [*TRAIN, *named]), tmp_path / "run")
    assert not cache.exists() or not any(cache.iterdir())
