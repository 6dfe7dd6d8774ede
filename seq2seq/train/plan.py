"""A training run's plan, built once at its start from the config it was given: the config it trains
with (a resumed run's own, a Hugging Face model's architecture), the checkpoint it resumes from, the
run directory's decision, and the corpus plan (seq2seq.data.corpus_plan: its directions, streams,
files by content, tokenizer and cache key).

    plan_run(cfg, run_dir, overrides) -> RunPlan
        .config   the resolved config: command.py's steps read their keys from it; recipe= and compile=
                  are chosen later, where the data and the device are there to time
        .resumed  the TrainingState a resume continues from (its corpus checked against .corpus.files)
        .run_dir, .claimed   where the run writes, and whether seq2seq-train checked and locked it
        .init_from  the weights init_from= names (seq2seq.train.init_from), read once, as .resumed is
        .corpus   what the data preparation reads (seq2seq.data.pipeline.prepare_corpus)
        .recipes  recipe= of a new run: each candidate's config, its overrides applied (the command
                  line's kept); seq2seq.train.recipe.choose_recipe picks one

The plan is where a run's config is edited: after resume=, init_from= and sentencepiece (here), after
recipe= (plan_recipes) and after compile=auto (with_compile, once run_compile has measured). Nothing
below takes a whole config: command.py reads the plan's keys, the Trainer gets its parts (seq2seq.train.parts).

The corpus files are hashed once, here: a resume's check against its checkpoint's record reads the
plan's digests, and the data preparation keys its cache with the same ones.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from seq2seq.artifacts.checkpoint import TrainingState, load_training_state
from seq2seq.artifacts.huggingface import family_name, has_language_codes, pretrained_model_config
from seq2seq.artifacts.marian import is_huggingface_model, local_directory
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import (
    AUTO_RECIPE,
    FIXED_RECIPE,
    TrainConfig,
    UserError,
    as_dict,
    check_weights_source,
    parse_overrides,
    typed_dotlist,
    validate_recipes,
    validate_train,
)
from seq2seq.data.corpus_plan import CorpusPlan, plan_corpus
from seq2seq.data.directions import LANGUAGE_CODES
from seq2seq.data.tokenizer import is_pretrained_tokenizer_directory
from seq2seq.inference.target_language import UNNAMED
from seq2seq.train.init_from import InitialWeights, read_initial_weights
from seq2seq.train.recipe import Candidate, RecipePlan
from seq2seq.train.resume import check_same_corpus, resumed_config
from seq2seq.train.run_outputs import check_new_run_directory


@dataclass(frozen=True)
class RunPlan:
    config: DictConfig  # the run's own copy, validated; nothing after the plan edits it (copies do)
    resumed: TrainingState | None  # the checkpoint resume= continues from
    run_dir: Path
    claimed: bool  # seq2seq-train checked this directory and holds its lock: not checked again
    corpus: CorpusPlan
    recipes: RecipePlan | None  # recipe= of a new run (auto or a name); None: fixed, or a resumed run's own
    init_from: InitialWeights | None = None  # a new run's init_from=, read; None: fresh weights, or a resume


def plan_run(
    cfg: DictConfig, run_dir: Path, overrides: list[str], checked: bool = False, claimed: bool = False
) -> RunPlan:
    """The run `cfg` asks for, in `run_dir`. `checked`: the caller validated `cfg` (seq2seq-train does,
    before torch loads): a resumed run's config or a Hugging Face model's architecture are new here, and
    validated here all the same. `claimed`: the directory was checked and locked by seq2seq-train; else a
    new run's is checked here (no earlier run in it, or overwrite=true). `cfg` itself is left as given."""
    cfg, resumed = copy.deepcopy(cfg), None  # edited below (a Marian model's architecture, ...): ours now
    pretrained = None  # SentencePiece tokenizers the run uses as they are; None: it trains its own
    check_weights_source(cfg.resume, cfg.init_from)  # before resumed_config drops init_from
    if cfg.resume:
        resumed = load_training_state(RunDir(cfg.resume).find_checkpoint(prefer=("last",)))
        cfg, checked = resumed_config(cfg.resume, overrides, resumed.config), False
        pretrained = Path(cfg.resume) if is_pretrained_tokenizer_directory(Path(cfg.resume)) else None
    elif cfg.init_from and is_huggingface_model(cfg.init_from):
        pretrained = local_directory(cfg.init_from)
        cfg, checked = pretrained_config(cfg, overrides, pretrained), False
    elif cfg.data.tokenizer == "sentencepiece":
        cfg = sentencepiece_config(cfg, overrides)  # decoder_start=pad: a valid choice, whatever was checked
    if not checked:
        validate_train(cfg)
        validate_recipes(cfg)
    if resumed is None and not claimed:  # before the corpus is hashed: a wrong directory costs nothing
        check_new_run_directory(run_dir, cfg.overwrite)
    recipes = plan_recipes(cfg, overrides) if resumed is None else None  # a resumed run's config holds its choice
    init_from = read_initial_weights(cfg.init_from, pretrained) if resumed is None and cfg.init_from else None
    if init_from is not None and cfg.recipe != AUTO_RECIPE:  # the model trained is known: say so now
        init_from.check_fits(as_dict((recipes.candidates[0].config if recipes else cfg).model))
    corpus = plan_corpus(cfg.data, pretrained)  # the corpus files hashed, once
    if resumed is not None:
        check_same_corpus(resumed.corpus, corpus.files, cfg.data, cfg.resume)
    return RunPlan(cfg, resumed, run_dir, claimed, corpus, recipes, init_from)


def pretrained_config(cfg: DictConfig, overrides: list[str], directory: Path) -> DictConfig:
    """The run's config with the architecture of the Marian model init_from names (in `directory`):
    model.* comes from it (a command-line override of an architecture key is an error), and the
    vocabulary is its."""
    cfg.model = pretrained_model_config(directory, overrides, cfg.model)
    if has_language_codes(directory):
        language_code_data(cfg, overrides, family_name(directory))
    else:
        cfg.data.joint_vocab = not (directory / "target_vocab.json").is_file()
    return cfg


# What says which tokenizer a run trains: an NLLB-200/M2M-100/mBART-50 model brings its own.
OWN_TOKENIZER_KEYS = ("data.joint_vocab", "data.tokenizer", "data.vocab_size", "data.sentencepiece_type")


def language_code_data(cfg: DictConfig, overrides: list[str], family: str = "NLLB-200/M2M-100") -> None:
    """An NLLB-200, M2M-100 or mBART-50 model (`family`: its name in messages) is trained in its own
    layout (data.lang_tag=language_codes: each source starts with its language's code, each target with
    its own after </s>), on its one vocabulary; a run of one direction is
    data.directions=[src_lang-tgt_lang], so that both codes are put in."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "data.lang_tag" and value != LANGUAGE_CODES:
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an {family} model, trained with its own layout "
                f"(data.lang_tag={LANGUAGE_CODES}: its language codes, not >>xx<< tags); drop the override"
            )
        if key in OWN_TOKENIZER_KEYS and not (key == "data.joint_vocab" and value.lower() == "true"):
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an {family} model, whose one vocabulary and "
                "SentencePiece model are its own (a Marian model's separate vocabularies are not); drop the override"
            )
    cfg.data.lang_tag, cfg.data.joint_vocab = LANGUAGE_CODES, True
    if not cfg.data.directions:
        if cfg.data.kind == "builtin" or cfg.data.src_lang in UNNAMED or cfg.data.tgt_lang in UNNAMED:
            raise UserError(
                f"init_from={cfg.init_from}: an {family} model needs its languages named: data.src_lang and "
                "data.tgt_lang (or data.directions) as its codes (eng_Latn, __en__'s en) or ISO 639-1 codes (en, de)"
            )
        cfg.data.directions = [f"{cfg.data.src_lang}-{cfg.data.tgt_lang}"]


def sentencepiece_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A new run with data.tokenizer=sentencepiece starts its targets from pad, as Marian models do:
    its vocabulary has no <s> (seq2seq.data.sentencepiece_training), and the formats it exports to
    (Marian, CTranslate2's converter, Argos) start the decoder from pad's zero vector."""
    if any(o.lstrip("+").startswith("model.decoder_start=") and not o.endswith("=pad") for o in overrides):
        raise UserError(
            "model.decoder_start: data.tokenizer=sentencepiece has no <s>; its targets start from pad (drop the override)"
        )
    cfg.model.decoder_start = "pad"
    return cfg


def plan_recipes(cfg: DictConfig, overrides: Sequence[str]) -> RecipePlan | None:
    """recipe=auto or a recipe's name: every candidate's config, its overrides applied except those the
    command line set (the user's word wins); None for recipe=fixed, which trains the config as it is."""
    if cfg.recipe == FIXED_RECIPE:
        return None
    user_keys = user_override_keys(overrides)
    candidates = []
    for recipe in cfg.recipes if cfg.recipe == AUTO_RECIPE else [r for r in cfg.recipes if r.name == cfg.recipe]:
        config = copy.deepcopy(cfg)
        applied = apply_recipe(config, recipe.name, user_keys)
        kept = sorted(key for key in recipe_overrides(cfg, recipe.name) if set_by_user(key, user_keys))
        candidates.append(Candidate(recipe.name, recipe.min_updates, config, tuple(applied), tuple(kept)))
    return RecipePlan(cfg.recipe, tuple(candidates), cfg.max_minutes, cfg.max_steps)


def recipe_overrides(cfg: DictConfig, name: str) -> dict[str, str]:
    index = [r.name for r in cfg.recipes].index(name)
    return parse_overrides(cfg.recipes[index], index)


def apply_recipe(cfg: DictConfig, name: str, user_keys: set[str]) -> list[str]:
    """Sets cfg.recipe to `name` and applies its overrides, except those the user gave on the command
    line (the user's word wins). Returns the overrides applied, as key=value."""
    applied = []
    for key, value in recipe_overrides(cfg, name).items():
        if set_by_user(key, user_keys):
            continue
        # parsed as the command line would be (numbers, booleans, null; a text key's value as written)
        parsed = OmegaConf.select(typed_dotlist([f"{key}={value}"], TrainConfig), key)
        OmegaConf.update(cfg, key, parsed, merge=False)
        applied.append(f"{key}={value}")
    cfg.recipe = name
    return applied


def user_override_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys a Hydra command line sets (group choices such as model=small included)."""
    return {o.lstrip("+~").split("=", 1)[0] for o in overrides}


def set_by_user(key: str, user_keys: set[str]) -> bool:
    """model.dropout is the user's if the command line set model.dropout, or chose the group model=."""
    parts = key.split(".")
    return any(".".join(parts[:n]) in user_keys for n in range(1, len(parts) + 1))


def with_compile(cfg: DictConfig, compiled: bool) -> DictConfig:
    """A copy of `cfg` with compile=auto's choice as compile=true or false: the checkpoints keep it, so a
    resumed run continues as it started and measures nothing."""
    chosen = copy.deepcopy(cfg)
    chosen.compile = "true" if compiled else "false"
    return chosen
