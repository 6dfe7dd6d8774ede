"""recipe=auto: the run times its candidates on this machine and takes the first that will make the
updates it needs in max_minutes; the choice is recorded, the user's overrides win, a resume keeps it.

Time is a fake clock that each update advances by a pace that depends on the model's width, so which
candidate wins is decided by arithmetic here, not by how fast or loaded the test machine is. The pace is
the median of TIMED_UPDATES updates (after one untimed), its spread at least MIN_SPREAD; a candidate whose
expected updates straddle its minimum within the spread is a close call, and a close call goes to the next."""

from __future__ import annotations

import statistics

import pytest
from conftest import TINY_TRAIN, compose_config, train_logging
from omegaconf import OmegaConf
from test_budget import FakeClock

import seq2seq.train.command as run
import seq2seq.train.trainer as loop
import seq2seq.train.update as update
from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.config import UserError, validate_recipes
from seq2seq.train.plan import apply_recipe, plan_recipes, set_by_user
from seq2seq.train.recipe import MIN_SPREAD, TIMED_UPDATES, UPDATE_SHARE, Pace

SECONDS_PER_UPDATE = {64: 7.0, 32: 2.0}  # by model.d_model: the wide candidate is 3.5x slower
# Each update of the run once its recipe is chosen: what the tests check is decided by then, so the run
# spends what is left of its budget in an update or two (not the 20-60 real updates its pace allows).
RUN_UPDATE_SECONDS = 60.0


class PacedMachine(FakeClock):
    """A fake clock that each update advances by its model's pace; `wide_paces` (if set) are the wide
    candidate's successive update times instead, the probe's untimed first update included."""

    def __init__(self) -> None:
        super().__init__()
        self.wide_paces: list[float] = []
        self.chosen = False  # the recipe is chosen: the run's own updates are RUN_UPDATE_SECONDS each

    def advance(self, d_model: int) -> None:
        if self.chosen:
            self.now += RUN_UPDATE_SECONDS
        else:
            self.now += self.wide_paces.pop(0) if d_model == 64 and self.wide_paces else SECONDS_PER_UPDATE[d_model]


@pytest.fixture
def paced_machine(monkeypatch: pytest.MonkeyPatch) -> PacedMachine:
    clock = PacedMachine()
    monkeypatch.setattr(loop.Trainer, "clock", staticmethod(clock))
    apply_update, choose_recipe = update.Update._apply, run.choose_recipe

    def paced_update(self, *args):
        clock.advance(self.parts.d_model)
        apply_update(self, *args)

    def choose_then_run(*args, **kwargs):
        chosen = choose_recipe(*args, **kwargs)
        clock.chosen = True
        return chosen

    monkeypatch.setattr(update.Update, "_apply", paced_update)
    monkeypatch.setattr(run, "choose_recipe", choose_then_run)
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


# What the budget has spent once a candidate's pace is known: its probe's updates (the untimed first
# included), and those of the candidates timed before it. The fake clock stands still elsewhere.
WIDE_TIMED = (TIMED_UPDATES + 1) * SECONDS_PER_UPDATE[64]
NARROW_TIMED = WIDE_TIMED + (TIMED_UPDATES + 1) * SECONDS_PER_UPDATE[32]


def updates_in(minutes: float, seconds_per_update: float, spent: float = WIDE_TIMED) -> int:
    """The updates at that pace in what is left of max_minutes after `spent` seconds."""
    return int((minutes * 60 - spent) * UPDATE_SHARE / seconds_per_update)


def at_the_slow_end(minutes: float, seconds_per_update: float, spent: float = WIDE_TIMED) -> int:
    """The updates at the slow end of a steady pace's spread (MIN_SPREAD)."""
    return updates_in(minutes, seconds_per_update * (1 + MIN_SPREAD), spent)


def at_the_fast_end(minutes: float, seconds_per_update: float, spent: float = WIDE_TIMED) -> int:
    return updates_in(minutes, seconds_per_update * (1 - MIN_SPREAD), spent)


def test_a_slow_machine_gets_the_smaller_recipe_and_the_run_records_it(tmp_path, paced_machine):
    minutes = 2.0  # wide: (120 - 42) * 0.85 / 7 = 9 updates (< 20); narrow: 28
    assert updates_in(minutes, 7.0) < 20
    summary, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow"
    assert (saved["model"]["d_model"], saved["model"]["encoder_layers"], saved["model"]["dropout"]) == (32, 4, 0.3)
    assert isinstance(saved["model"]["d_model"], int)  # parsed as the command line would, not kept a string
    choice = next(line for line in lines if line.startswith("recipe: "))
    assert f"recipe: narrow for {minutes:g} minutes ({(minutes * 60 - NARROW_TIMED) / 60:.1f} left)" in choice
    wide = f"({at_the_slow_end(minutes, 7.0)}-{at_the_fast_end(minutes, 7.0)}), wants >= 20"
    assert f"wide in fp32 at 7.00 s/update ±5%: ~{updates_in(minutes, 7.0)} updates {wide}" in choice
    assert f"narrow in fp32 at 2.00 s/update ±5%: ~{updates_in(minutes, 2.0, NARROW_TIMED)} updates" in choice
    assert "close call" not in "".join(lines)  # 10 updates at most: clearly short of 20


def test_a_fast_machine_gets_the_larger_recipe_without_timing_the_rest(tmp_path, paced_machine, monkeypatch):
    minutes = 3.6  # wide: (216 - 42) * 0.85 / 7 = 21 updates, 20 at the slow end of its spread: enough
    assert at_the_slow_end(minutes, 7.0) >= 20
    timed = []
    original = update.Update.__init__

    def counting_init(self, parts, *args, **kwargs):
        timed.append(parts.d_model)
        original(self, parts, *args, **kwargs)

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
    from seq2seq.cli.train import train

    train(cfg, tmp_path / "run", [*CANDIDATES, *overrides])
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["d_model"] == 32
    assert saved["model"]["dropout"] == 0.05


def test_a_resumed_run_keeps_its_recipe_and_measures_nothing(tmp_path, paced_machine, monkeypatch):
    train_logging(recipe_config(2.0), tmp_path / "run")
    monkeypatch.setattr("seq2seq.train.recipe.measure_pace", pytest.fail)  # any timing fails the test
    resumed = compose_config("train", [*TINY_TRAIN, f"resume={tmp_path / 'run'}", "max_minutes=3"])
    from seq2seq.cli.train import train

    train(resumed, tmp_path / "run", [f"resume={tmp_path / 'run'}", "max_minutes=3"])
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["d_model"] == 32


def test_a_named_recipe_is_applied_without_timing(tmp_path, monkeypatch):
    monkeypatch.setattr("seq2seq.train.recipe.measure_pace", pytest.fail)
    cfg = compose_config("train", [*TINY_TRAIN, *CANDIDATES[1:], "recipe=narrow"])
    train_logging(cfg, tmp_path / "run")
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert saved["recipe"] == "narrow" and saved["model"]["encoder_layers"] == 4


def test_train_chooses_the_recipe_on_its_own_copy_of_the_config(tmp_path, monkeypatch):
    """The config given to train() is left as it was: the recipe (and precision=auto) are resolved in
    the run's own config, the one the Trainer reads and the checkpoint records."""
    monkeypatch.setattr("seq2seq.train.recipe.measure_pace", pytest.fail)
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


def test_a_close_call_goes_to_the_next_candidate_and_the_log_says_so(tmp_path, paced_machine):
    """At 7 s an update wide makes its 20 updates in what 3.5 minutes leave, but not at the slow end
    of the measurement's spread: the choice must not hang on that, so narrow is taken, every time."""
    minutes = 3.5
    assert updates_in(minutes, 7.0) >= 20 > at_the_slow_end(minutes, 7.0)
    _, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["recipe"] == "narrow"
    close = [line for line in lines if "close call" in line]
    slow, fast = at_the_slow_end(minutes, 7.0), at_the_fast_end(minutes, 7.0)
    assert close == [
        f"recipe: close call: wide's {slow}-{fast} updates straddle its minimum 20; "
        "a close call goes to the next candidate"
    ]


def test_one_update_that_waited_for_a_core_does_not_change_the_choice(tmp_path, paced_machine):
    """The pace is the median of the timed updates: one update slowed fourfold (the machine was busy
    for it) leaves wide at 7 s an update, where a mean of the first three would put it at 14."""
    paced_machine.wide_paces = [50.0, 7.0, 7.0, 30.0, 7.0, 7.0]  # the first, untimed, allocates
    assert len(paced_machine.wide_paces) == TIMED_UPDATES + 1
    assert statistics.mean(paced_machine.wide_paces[1:4]) > 14
    minutes = 4.8  # what the probe's 108 s leave: (288 - 108) * 0.85 / 7.35 = 20 updates at the slow end
    assert at_the_slow_end(minutes, 7.0, sum(paced_machine.wide_paces)) >= 20
    _, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["recipe"] == "wide"
    assert any("wide in fp32 at 7.00 s/update ±5%" in line for line in lines)


def test_the_choice_counts_the_minutes_spent_before_it(tmp_path, paced_machine, monkeypatch):
    """Regression: the estimate counted all of max_minutes, after data preparation and the timing had
    spent some (a 5-minute run spent 5.2 before its first update, and estimated ~38 updates). 3.6
    minutes make wide's 20 updates from the start; a minute of data preparation leaves too few."""
    minutes, preparing = 3.6, 60.0
    assert at_the_slow_end(minutes, 7.0) >= 20 > updates_in(minutes, 7.0, preparing + WIDE_TIMED)
    prepare = run.prepare_corpus

    def slow_preparation(*args, **kwargs):
        paced_machine.now += preparing
        return prepare(*args, **kwargs)

    monkeypatch.setattr(run, "prepare_corpus", slow_preparation)
    _, lines = train_logging(recipe_config(minutes), tmp_path / "run")
    assert load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["recipe"] == "narrow"
    choice = next(line for line in lines if line.startswith("recipe: "))
    left = (minutes * 60 - preparing - NARROW_TIMED) / 60
    assert f"recipe: narrow for {minutes:g} minutes ({left:.1f} left)" in choice, choice
    assert f"~{updates_in(minutes, 7.0, preparing + WIDE_TIMED)} updates" in choice


@pytest.mark.parametrize(
    ("times", "median", "spread"),
    [
        ([7.0] * 5, 7.0, MIN_SPREAD),  # a steady pace still has the floor's error
        ([7.0, 7.0, 30.0, 7.0, 7.0], 7.0, MIN_SPREAD),  # one outlier moves neither
        ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, (4.0 - 2.0) / 2 / 3.0),  # quartiles 2 and 4 (inclusive method)
    ],
)
def test_the_pace_is_the_median_and_its_spread_half_the_interquartile_range(times, median, spread):
    pace = Pace.of(times, "bf16")
    assert (pace.seconds, pace.precision) == (median, "bf16")
    assert pace.spread == pytest.approx(spread)


def test_set_by_user_covers_group_choices():
    assert set_by_user("model.dropout", {"model"})
    assert set_by_user("model.dropout", {"model.dropout"})
    assert not set_by_user("model.dropout", {"model.d_model", "optim"})


def test_the_plan_holds_each_candidates_config_with_the_users_keys_kept():
    """recipe=auto: every candidate, in order, its overrides applied to a copy except the keys the command
    line set; a named recipe: that one alone; fixed: none. The config given is left as it was."""
    user = ["model.dropout=0.25"]
    cfg = recipe_config(2.0, user)
    recipes = plan_recipes(cfg, [*CANDIDATES, *user])
    assert recipes.asked == "auto" and [c.name for c in recipes.candidates] == ["wide", "narrow"]
    assert [c.minimum for c in recipes.candidates] == [20, 0]
    narrow = recipes.named("narrow")
    assert narrow.applied == ("model.d_model=32", "model.encoder_layers=4", "model.decoder_layers=4")
    assert narrow.kept == ("model.dropout",)
    assert (narrow.config.model.d_model, narrow.config.model.dropout, narrow.config.recipe) == (32, 0.25, "narrow")
    assert (cfg.model.d_model, cfg.recipe) == (64, "auto")  # the run's own config: untouched
    named = plan_recipes(compose_config("train", [*TINY_TRAIN, *CANDIDATES[1:], "recipe=narrow"]), [])
    assert [c.name for c in named.candidates] == ["narrow"] and named.candidates[0].config.model.dropout == 0.3
    assert plan_recipes(compose_config("train", TINY_TRAIN), []) is None  # recipe=fixed by default


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


def test_compile_auto_takes_the_recipes_eager_probe_instead_of_timing_it_again(tmp_path, paced_machine, monkeypatch):
    # compile=auto timed the chosen recipe's eager update a second time (another model built, another
    # six updates), after recipe=auto had just timed it. The compiled probe is faked: it is not what
    # this test is about, and compiling would take minutes.
    import seq2seq.train.recipe as recipe
    import seq2seq.train.run_compile as run_compile

    probes = []
    measure = recipe.measure_pace

    def counting_probe(parts, data, device, clock, precision=None):
        probes.append((parts.model.config.d_model, parts.update.compiled))
        if parts.update.compiled:
            return Pace(100.0, MIN_SPREAD, precision.precision, first_seconds=1000.0)
        return measure(parts, data, device, clock, precision)

    monkeypatch.setattr(recipe, "measure_pace", counting_probe)
    monkeypatch.setattr(run_compile, "measure_pace", counting_probe)
    # compile.json of its own: the faked timings must not decide another test's compile=auto
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    minutes = 3.6  # the wide candidate makes its minimum (the test above): it alone is timed
    summary, lines = train_logging(recipe_config(minutes, ["compile=auto"]), tmp_path / "run")
    assert probes == [(64, False), (64, True)]
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]
    assert (saved["recipe"], saved["compile"]) == ("wide", "false")
    compile_line = next(line for line in lines if line.startswith("compile: "))
    assert "vs 7 eager" in compile_line  # the recipe's pace: 7.00 s an update
