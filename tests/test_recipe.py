"""recipe=auto: the run times its candidates on this machine and takes the first that will make the
updates it needs in max_minutes; the choice is recorded, the user's overrides win, a resume keeps it.

Time is a fake clock that each update advances by a pace that depends on the model's width, so which
candidate wins is decided by arithmetic here, not by how fast or loaded the test machine is."""

from __future__ import annotations

import pytest
from conftest import TINY_TRAIN, compose_config, train_logging
from omegaconf import OmegaConf
from test_budget import FakeClock

import seq2seq.train.trainer as loop
import seq2seq.train.update as update
from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.config import UserError, validate_recipes
from seq2seq.train.recipe import UPDATE_SHARE, apply_recipe, set_by_user

SECONDS_PER_UPDATE = {64: 7.0, 32: 2.0}  # by model.d_model: the wide candidate is 3.5x slower


@pytest.fixture
def paced_machine(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(loop.Trainer, "clock", staticmethod(clock))
    apply_update = update.Update._apply

    def paced_update(self, *args):
        clock.now += SECONDS_PER_UPDATE[self.cfg.model.d_model]
        apply_update(self, *args)

    monkeypatch.setattr(update.Update, "_apply", paced_update)
    return clock


# Two candidates, largest first: "wide" (the tiny model, d_model 64) wants 20 updates, "narrow"
# (d_model 32, 4 layers each side, more dropout) is the fall-back.
CANDIDATES = [
    "recipe=auto",
    "recipes=[{name: wide, min_updates: 20}, {name: narrow, overrides: "
    "['model.d_model=32', 'model.encoder_layers=4', 'model.decoder_layers=4', 'model.dropout=0.3']}]",
]


def recipe_config(minutes: float, extra: list[str] | None = None):
    overrides = [*TINY_TRAIN, "max_steps=null", f"max_minutes={minutes}", "optim.schedule=linear_to_zero"]
    return compose_config("train", [*overrides, "valid_every=1000", "save_every=1000", *CANDIDATES, *(extra or [])])


def updates_in(minutes: float, seconds_per_update: float) -> int:
    return int(minutes * 60 * UPDATE_SHARE / seconds_per_update)


def test_a_slow_machine_gets_the_smaller_recipe_and_the_run_records_it(tmp_path, paced_machine):
    minutes = 2.0  # wide: 120 * 0.85 / 7 = 14 updates (< 20); narrow: 51
    assert updates_in(minutes, 7.0) < 20
    summary, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow"
    assert (saved["model"]["d_model"], saved["model"]["encoder_layers"], saved["model"]["dropout"]) == (32, 4, 0.3)
    assert isinstance(saved["model"]["d_model"], int)  # parsed as the command line would, not kept a string
    choice = next(line for line in lines if line.startswith("recipe: "))
    assert f"recipe: narrow for {minutes:g} minutes" in choice
    assert f"wide ~{updates_in(minutes, 7.0)} updates at 7.00 s/update (wants >= 20)" in choice
    assert f"narrow ~{updates_in(minutes, 2.0)} updates at 2.00 s/update" in choice


def test_a_fast_machine_gets_the_larger_recipe_without_timing_the_rest(tmp_path, paced_machine, monkeypatch):
    minutes = 3.0  # wide: 21 updates: enough
    assert updates_in(minutes, 7.0) >= 20
    timed = []
    original = update.Update.__init__

    def counting_init(self, cfg, *args, **kwargs):
        timed.append(cfg.model.d_model)
        original(self, cfg, *args, **kwargs)

    monkeypatch.setattr(update.Update, "__init__", counting_init)
    trainers = []
    trainer_init = loop.Trainer.__init__
    monkeypatch.setattr(
        loop.Trainer, "__init__", lambda self, *a, **k: trainers.append(1) or trainer_init(self, *a, **k)
    )
    _, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "wide" and saved["model"]["d_model"] == 64
    assert timed == [64, 64]  # the probe, then the run itself: narrow was never built
    assert len(trainers) == 1  # the probe times an update without a throwaway Trainer around it
    assert any("recipe wide sets nothing" in line for line in lines)


def test_the_command_line_wins_over_the_recipe(tmp_path, paced_machine):
    overrides = ["model.dropout=0.05"]
    cfg = recipe_config(2.0, overrides)
    from seq2seq.train.run import train

    train(cfg, tmp_path / "run", [*CANDIDATES, *overrides])
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["d_model"] == 32
    assert saved["model"]["dropout"] == 0.05


def test_a_resumed_run_keeps_its_recipe_and_measures_nothing(tmp_path, paced_machine, monkeypatch):
    train_logging(recipe_config(2.0), tmp_path / "run")
    monkeypatch.setattr("seq2seq.train.recipe.seconds_per_update", pytest.fail)  # any timing fails the test
    resumed = compose_config("train", [*TINY_TRAIN, f"resume={tmp_path / 'run'}", "max_minutes=3"])
    from seq2seq.train.run import train

    train(resumed, tmp_path / "run", [f"resume={tmp_path / 'run'}", "max_minutes=3"])
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["d_model"] == 32


def test_a_named_recipe_is_applied_without_timing(tmp_path, monkeypatch):
    monkeypatch.setattr("seq2seq.train.recipe.seconds_per_update", pytest.fail)
    cfg = compose_config("train", [*TINY_TRAIN, *CANDIDATES[1:], "recipe=narrow"])
    train_logging(cfg, tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["encoder_layers"] == 4


def test_train_chooses_the_recipe_on_its_own_copy_of_the_config(tmp_path, monkeypatch):
    """The config given to train() is left as it was: the recipe (and precision=auto) are resolved in
    the run's own config, the one the Trainer reads and the checkpoint records."""
    monkeypatch.setattr("seq2seq.train.recipe.seconds_per_update", pytest.fail)
    cfg = compose_config("train", [*TINY_TRAIN, *CANDIDATES[1:], "recipe=narrow", "precision=auto"])
    given = OmegaConf.to_container(cfg)
    train_logging(cfg, tmp_path / "run")
    assert OmegaConf.to_container(cfg) == given
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["model"]["encoder_layers"] == 4 and given["model"]["encoder_layers"] == 2
    assert saved["precision"] in ("fp32", "bf16")


def test_when_no_candidate_makes_its_minimum_the_last_is_taken(tmp_path, paced_machine):
    # narrow would make 51 updates in 2 minutes, far short of the minimum given it here
    train_logging(recipe_config(2.0, ["recipes.1.min_updates=1000000"]), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["recipe"] == "narrow"


def test_set_by_user_covers_group_choices():
    assert set_by_user("model.dropout", {"model"})
    assert set_by_user("model.dropout", {"model.dropout"})
    assert not set_by_user("model.dropout", {"model.d_model", "optim"})


def test_apply_recipe_parses_values_as_the_command_line_does():
    cfg = compose_config("train", [*CANDIDATES[1:], "recipes.0.overrides=['optim.lr=2e-3','max_steps=null']"])
    applied = apply_recipe(cfg, "wide", set())
    assert applied == ["optim.lr=2e-3", "max_steps=null"]
    assert cfg.optim.lr == pytest.approx(0.002) and cfg.max_steps is None and cfg.recipe == "wide"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["recipe=fast"], "recipe: 'fast' is not one of auto, fixed, wide, narrow"),
        (["recipes.1.overrides=['model.d_modle=32']"], "recipes[1].overrides: 'model.d_modle' is not a key"),
        (["recipes.1.overrides=['data.vocab_size=6000']"], "recipes[1].overrides: 'data.vocab_size' cannot be set"),
        (["recipes.1.overrides=[model.dropout]"], "recipes[1].overrides: 'model.dropout' is not key=value"),
        (["recipes.1.name=wide"], "recipes: names must be unique"),
        (["recipes.1.name=auto"], "recipes: every candidate needs a name other than auto and fixed"),
    ],
)
def test_bad_recipes_get_a_one_line_error_naming_the_key(overrides, message):
    cfg = compose_config("train", [*CANDIDATES, *overrides])
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")) as error:
        validate_recipes(cfg)
    assert "\n" not in str(error.value)


def test_auto_without_candidates_is_an_error():
    cfg = compose_config("train", ["recipe=auto"])
    with pytest.raises(UserError, match="recipe: auto needs candidates in recipes"):
        validate_recipes(cfg)


def test_the_multi30k_experiments_choose_their_recipe():
    cfg = compose_config("train", ["experiment=multi30k_en_de", "data.dir=/x"])
    assert cfg.recipe == "auto"
    validate_recipes(cfg)
    assert OmegaConf.to_container(cfg.recipes)[-1]["min_updates"] == 0  # the last is the fall-back
