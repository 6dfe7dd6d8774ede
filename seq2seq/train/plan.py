"""A training run's plan, built once at its start from the config it was given: the config it trains
with (a resumed run's own, a Hugging Face model's architecture), the checkpoint it resumes from, the
run directory's decision, and the corpus plan (seq2seq.data.corpus_plan: its directions, streams,
files by content, tokenizer and cache key).

    plan_run(cfg, run_dir, overrides) -> RunPlan
        .config   the resolved config: run.py's steps read their keys from it; recipe= and compile=
                  are chosen later, on copies, where the data and the device are there to time
        .resumed  the TrainingState a resume continues from (its corpus checked against .corpus.files)
        .run_dir, .claimed   where the run writes, and whether seq2seq-train checked and locked it
        .corpus   what the data preparation reads (seq2seq.data.pipeline.prepare_corpus)

The corpus files are hashed once, here: a resume's check against its checkpoint's record reads the
plan's digests, and the data preparation keys its cache with the same ones.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from seq2seq.artifacts.checkpoint import TrainingState, load_training_state
from seq2seq.artifacts.huggingface import has_language_codes, pretrained_model_config
from seq2seq.artifacts.marian import is_huggingface_model, local_directory
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import UserError, check_weights_source, validate_recipes, validate_train
from seq2seq.data.corpus_plan import CorpusPlan, plan_corpus
from seq2seq.data.directions import LANGUAGE_CODES
from seq2seq.data.tokenizer import is_pretrained_tokenizer_directory
from seq2seq.inference.target_language import UNNAMED
from seq2seq.train.resume import check_same_corpus, resumed_config
from seq2seq.train.run_outputs import check_new_run_directory


@dataclass(frozen=True)
class RunPlan:
    config: DictConfig  # the run's own copy, validated; nothing after the plan edits it (copies do)
    resumed: TrainingState | None  # the checkpoint resume= continues from
    run_dir: Path
    claimed: bool  # seq2seq-train checked this directory and holds its lock: not checked again
    overrides: tuple[str, ...]  # the command line's, for the recipe (the user's keys win)
    corpus: CorpusPlan


def plan_run(
    cfg: DictConfig, run_dir: Path, overrides: list[str], checked: bool = False, claimed: bool = False
) -> RunPlan:
    """The run `cfg` asks for, in `run_dir`. `checked`: the caller validated `cfg` (seq2seq-train does,
    before torch loads): a resumed run's config or a Hugging Face model's architecture are new here, and
    validated here all the same. `claimed`: the directory was checked and locked by seq2seq-train; else a
    new run's is checked here (no earlier run in it, or overwrite=true). `cfg` itself is left as given."""
    cfg, resumed = copy.deepcopy(cfg), None  # edited below (a Marian model's architecture, ...): ours now
    check_weights_source(cfg.resume, cfg.init_from)  # before resumed_config drops init_from
    if cfg.resume:
        resumed = load_training_state(RunDir(cfg.resume).find_checkpoint(prefer=("last",)))
        cfg, checked = resumed_config(cfg.resume, overrides, resumed.config), False
    elif cfg.init_from and is_huggingface_model(cfg.init_from):
        cfg, checked = pretrained_config(cfg, overrides), False
    elif cfg.data.tokenizer == "sentencepiece":
        cfg = sentencepiece_config(cfg, overrides)  # decoder_start=pad: a valid choice, whatever was checked
    if not checked:
        validate_train(cfg)
        validate_recipes(cfg)
    if resumed is None and not claimed:  # before the corpus is hashed: a wrong directory costs nothing
        check_new_run_directory(run_dir, cfg.overwrite)
    corpus = plan_corpus(cfg.data, pretrained_tokenizers(cfg))  # the corpus files hashed, once
    if resumed is not None:
        check_same_corpus(resumed.corpus, corpus.files, cfg.data, cfg.resume)
    return RunPlan(cfg, resumed, run_dir, claimed, tuple(overrides), corpus)


def pretrained_config(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The run's config with the architecture of the Marian model init_from names: model.* comes from
    it (a command-line override of an architecture key is an error), and the vocabulary is its."""
    directory = local_directory(cfg.init_from)
    cfg.model = pretrained_model_config(directory, overrides, cfg.model)
    if has_language_codes(directory):
        language_code_data(cfg, overrides)
    else:
        cfg.data.joint_vocab = not (directory / "target_vocab.json").is_file()
    return cfg


# What says which tokenizer a run trains: an NLLB-200/M2M-100 model brings its own.
OWN_TOKENIZER_KEYS = ("data.joint_vocab", "data.tokenizer", "data.vocab_size", "data.sentencepiece_type")


def language_code_data(cfg: DictConfig, overrides: list[str]) -> None:
    """An NLLB-200 or M2M-100 model is trained in its own layout (data.lang_tag=language_codes: each
    source starts with its language's code, each target with its own after </s>), on its one vocabulary;
    a run of one direction is data.directions=[src_lang-tgt_lang], so that both codes are put in."""
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "data.lang_tag" and value != LANGUAGE_CODES:
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an NLLB-200/M2M-100 model, trained with its own layout "
                f"(data.lang_tag={LANGUAGE_CODES}: its language codes, not >>xx<< tags); drop the override"
            )
        if key in OWN_TOKENIZER_KEYS and not (key == "data.joint_vocab" and value.lower() == "true"):
            raise UserError(
                f"'{override}': init_from={cfg.init_from} is an NLLB-200/M2M-100 model, whose one vocabulary and "
                "SentencePiece model are its own (a Marian model's separate vocabularies are not); drop the override"
            )
    cfg.data.lang_tag, cfg.data.joint_vocab = LANGUAGE_CODES, True
    if not cfg.data.directions:
        if cfg.data.kind == "builtin" or cfg.data.src_lang in UNNAMED or cfg.data.tgt_lang in UNNAMED:
            raise UserError(
                f"init_from={cfg.init_from}: an NLLB-200/M2M-100 model needs its languages named: data.src_lang and "
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


def pretrained_tokenizers(cfg: DictConfig) -> Path | None:
    """Where the run's SentencePiece tokenizers come from, if it has them: the run directory being
    resumed, or the Marian model it starts from; None: the run trains its own tokenizer."""
    if cfg.resume:
        return Path(cfg.resume) if is_pretrained_tokenizer_directory(Path(cfg.resume)) else None
    if cfg.init_from and is_huggingface_model(cfg.init_from):
        return local_directory(cfg.init_from)
    return None
