"""The teacher: what it decodes from, the config it was trained with, and the corpus it translates.

The student inherits the teacher's data settings (languages, directions, tokenizer kind, vocabulary
size, filters): a `data.*` argument may name where the corpus lies (data.dir=, data.train_src=, ...) or
change a filter, never a language or the tokenizer kind, which would give a student the teacher cannot
teach (a corpus in another source language, a vocabulary of another kind).

A teacher fine-tuned from a pretrained NLLB-200, M2M-100 or mBART-50 model (data.lang_tag=language_codes)
is the exception (`for_student`): its tokenizer and layout are that model's (a 128k-256k vocabulary of
200 languages, the codes its checkpoint format needs), which a small student of a few languages has no
use for. The student learns from the teacher's translations as text, so it trains its own tokenizer:
data.tokenizer=sentencepiece by default (Marian's files, which export to Argos and CTranslate2 alike;
data.tokenizer= and data.vocab_size= may choose another), >>xx<< tags only where the teacher has more
than one direction, and this project's Transformer with the teacher's sizes under the student= preset.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from seq2seq.artifacts.checkpoint import is_checkpoint_file, load_checkpoint
from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.config import DataConfig, UserError, as_dict, data_config, typed_dotlist, validate_directions
from seq2seq.data.directions import LANGUAGE_CODES

# data.* keys that fix what the student reads and writes: they must be the teacher's.
SAME_AS_TEACHER = ("src_lang", "tgt_lang", "directions", "lang_tag", "tokenizer", "sentencepiece_type")
# What a pretrained NLLB-family teacher's student keeps of its model config (for_student): its size.
SIZE_KEYS = ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers")


@dataclass(frozen=True)
class Teacher:
    paths: list[str]  # what `seq2seq.inference.load` is given: [a run directory] or checkpoints (an ensemble)
    weights: list[Path]  # the files its weights are read from: the translations' cache key hashes them
    config: dict[str, Any]  # the training config of its (first) checkpoint

    @property
    def is_run(self) -> bool:
        return len(self.paths) == 1 and path_kind(self.paths[0]) is PathKind.RUN


def read_teacher(spec: str, given_as: str = "teacher=") -> Teacher:
    """teacher=<run directory> or teacher=<a.pt>,<b.pt> (an ensemble of checkpoints that share one
    tokenizer, as seq2seq-translate's checkpoint= takes them; the student's settings come from the
    first). A CTranslate2 or Marian directory has no training config to give the student its data, so
    it is refused. `given_as`: how the errors name the setting (scripts/back_translate.py's "--model ")."""
    paths = [p for p in str(spec).split(",") if p]
    if not paths:
        raise UserError(f"{given_as}{spec}: names nothing; give a run directory")
    if len(paths) == 1 and path_kind(paths[0]) is PathKind.RUN:
        run = RunDir(paths[0])
        config = for_student(load_checkpoint(run.find_checkpoint())["config"])
        return Teacher([str(run.root.resolve())], [run.model_file()], config)
    for path in paths:
        kind = path_kind(path)
        if kind is not PathKind.CHECKPOINT or not Path(path).is_file() or not is_checkpoint_file(Path(path)):
            what = kind.value if Path(path).exists() else "no such file or directory"
            raise UserError(
                f"{given_as}{spec}: {path}: {what}; give a run directory or training checkpoints "
                "(their training config gives the languages and the data settings)"
            )
    resolved = [str(Path(p).resolve()) for p in paths]
    return Teacher(resolved, [Path(p) for p in resolved], for_student(load_checkpoint(paths[0])["config"]))


def for_student(trained_with: dict[str, Any]) -> dict[str, Any]:
    """The teacher's training config as its student inherits it. A pretrained NLLB-200/M2M-100/mBART-50
    teacher (data.lang_tag=language_codes): its data settings without its model's tokenizer and layout
    (the student trains a SentencePiece tokenizer of its own, with >>xx<< tags at the decoder's start
    where there is more than one direction), its model settings reduced to its sizes (see the module's
    docstring for why)."""
    data = dict(trained_with.get("data") or {})
    if data.get("lang_tag") != LANGUAGE_CODES:
        return trained_with
    defaults = DataConfig()
    names = list(data.get("directions") or [])
    one = len(names) == 1 and names[0] == f"{data.get('src_lang')}-{data.get('tgt_lang')}"
    data.update(
        tokenizer="sentencepiece",
        sentencepiece_type=defaults.sentencepiece_type,
        joint_vocab=defaults.joint_vocab,
        prune_vocab=defaults.prune_vocab,  # the pretrained model's vocabulary was pruned, not the student's own
        lang_tag=defaults.lang_tag if one else "decoder_start",  # what an Argos package of one direction reads
        directions=None if one else names,
    )
    model = {k: v for k, v in (trained_with.get("model") or {}).items() if k in SIZE_KEYS}
    return {**trained_with, "data": data, "model": model, "pretrained_teacher": True}


def corpus_config(teacher: Teacher, overrides: list[str]) -> DataConfig:
    """The teacher's data config with the data.* arguments on top: the corpus translated, and the
    student's data settings. A language or tokenizer other than the teacher's is a one-line error."""
    saved = {k: v for k, v in teacher.config["data"].items() if k in DataConfig.__dataclass_fields__}
    base = OmegaConf.merge(OmegaConf.structured(DataConfig), saved)
    given = [o.removeprefix("data.") for o in overrides]
    try:
        merged = OmegaConf.merge(base, typed_dotlist(given, DataConfig))
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "data"
        raise UserError(f"data.{key}: {str(err).strip().splitlines()[0]}") from err
    fixed = SAME_AS_TEACHER[:3] if teacher.config.get("pretrained_teacher") else SAME_AS_TEACHER
    for key in fixed:  # a pretrained teacher's student chooses its own tokenizer (for_student)
        ours, theirs = _plain(merged[key]), _plain(base[key])
        if ours != theirs:
            raise UserError(
                f"data.{key}={ours}: the teacher's is {theirs}; a student learns the teacher's "
                f"{'tokenizer kind' if 'tokenizer' in key or 'sentencepiece' in key else 'languages'} "
                "(distil another corpus of the same languages, or train another teacher)"
            )
    if teacher.config.get("pretrained_teacher") and merged.lang_tag == LANGUAGE_CODES:
        raise UserError(
            f"data.lang_tag={LANGUAGE_CODES}: the layout of the teacher's pretrained model, whose tokenizer the "
            "student does not take (it trains its own); drop it (source_prefix or decoder_start tag a student)"
        )
    cfg = data_config(as_dict(merged))
    validate_directions(cfg)
    return cfg


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
