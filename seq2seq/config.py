"""Typed configuration: the schema Hydra checks every YAML file and override against.

The dataclasses are registered in Hydra's ConfigStore, so a misspelled key or a value of the wrong
type stops the run at start-up with a message that names the key. `validate_*` then checks what
types cannot express (d_model divisible by heads, positive warmup, ...) before any work is done.
Defaults live here once; the YAML files in `configs/` only say what they change.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from seq2seq import decoding_defaults as decoding
from seq2seq.decoding_defaults import MAX_SEED, SEED_RANGE


class UserError(Exception):
    """A problem with what the user gave us (config, files, checkpoint). Reported as one line, no traceback."""


class ConfigValueError(UserError, ValueError):
    """A setting with a value its key does not take: a UserError to the commands, a ValueError to Python callers."""


class ConfigTypeError(UserError, TypeError):
    """A setting of the wrong type, given in Python (the schema checks the command line's): a UserError
    to the commands, a TypeError to Python callers."""


# Every byte-level vocabulary holds the 256 bytes and the 4 special tokens (seq2seq/data/tokenizer.py),
# so a smaller data.vocab_size cannot be what the run gets.
BYTE_VOCABULARY_FLOOR = 256 + 4
MAX_POSITIONS = 65536  # far beyond what full attention over a sentence pair is used for
DROPOUT_KEYS = ("dropout", "attention_dropout", "activation_dropout")  # the model's dropout rates
# More threads than this per CPU take turns on the cores for nothing; far more (100000) end in OpenMP's
# "Thread creation failed" after the run has started.
THREADS_PER_CPU = 4


def setting(default: Any, help: str) -> Any:
    """A key with its one-line description, which `--help` and docs/configure-reference.md print
    (kept in the field's metadata, where Hydra and OmegaConf leave it alone)."""
    return field(default=default, metadata={"help": help})


@dataclass
class ModelConfig:
    d_model: int = setting(512, "width of every residual stream vector")
    heads: int = setting(8, "attention heads; each works on d_model / heads dimensions")
    ffn_dim: int = setting(2048, "inner width of the position-wise feed-forward network")
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = setting(0.1, "on embeddings+positions and on every sublayer output (paper: 0.1)")
    attention_dropout: float = setting(0.0, "on the attention weights")
    activation_dropout: float = setting(
        0.0, "inside the FFN, after the activation (not in the paper; costs time on a CPU)"
    )
    activation: str = setting("relu", "relu (paper) | gelu | silu (swish, as many OPUS-MT models)")
    norm_first: bool = setting(False, "False: post-norm as in the paper; True: pre-norm (steadier when deep)")
    positions: str = setting("sinusoidal", "sinusoidal (paper) | learned")
    max_positions: int = setting(256, "longest source or target, in tokens, the model can take")
    tie_output: bool = setting(True, "share the target embedding with the pre-softmax projection (paper §3.4)")
    share_embeddings: bool = setting(False, "one embedding for source and target; needs data.joint_vocab")
    # Settings a pretrained Marian (OPUS-MT) model brings (seq2seq.artifacts.marian); the defaults are the paper's.
    sinusoid_layout: str = setting(
        "interleaved",
        "interleaved: sin/cos alternate (paper) | split: sines, then cosines (Marian) | fairseq: split, with"
        " tensor2tensor's frequencies and positions from 2 (M2M-100, NLLB-200)",
    )
    scale_embedding: bool = setting(True, "multiply token embeddings by sqrt(d_model) (paper §3.4)")
    output_bias: bool = setting(False, "a fixed (untrained) bias on the logits: Marian's final_logits_bias")
    decoder_start: str = setting(
        "bos", "the token every target starts from: bos | pad (Marian) | eos (M2M-100, NLLB, mBART)"
    )
    embedding_norm: bool = setting(
        False, "a LayerNorm on embeddings + positions, each stack (mBART's layernorm_embedding)"
    )
    # Liu et al. 2021 ("Improving Zero-Shot Translation by Disentangling Positional Information"): one
    # middle encoder layer without it is less tied to the source's word order, which helps zero-shot.
    encoder_drop_residual_layer: int | None = setting(
        None, "index (0-based) of the encoder layer whose self-attention has no residual connection; null: none"
    )


@dataclass
class CorpusConfig:
    """One training corpus of data.corpora: its own reader and files, and how often it is shown."""

    name: str = setting("", "what the log and the cleaning report call it; unique within data.corpora")
    kind: str = setting("parallel_files", "parallel_files | tsv | jsonl | multi30k | hub (as data.kind)")
    weight: float = setting(
        1.0, "> 0: each pair is shown this many times an epoch (a fraction: a fresh fixed-seed sample each epoch)"
    )
    clean: Any = setting(None, "this corpus's rules: default | hard | none | [rule, ...]; null: data.clean's")
    tag: bool = setting(
        False, "back-translated: its sources start with <BT>, a token no real source (nor translation) has"
    )
    train_src: str | None = setting(None, "parallel_files: the source file ({src}/{tgt} with data.directions)")
    train_tgt: str | None = None
    train: str | None = setting(None, "tsv or jsonl: the file")
    src_key: str = "src"
    tgt_key: str = "tgt"
    dir: str | None = setting(None, "multi30k: the folder whose train.<lang> files are read")
    hub_name: str | None = None
    hub_subset: str | None = None


@dataclass
class CleanSettings:
    """The thresholds of data.clean's rules (docs/corpora.md, "Cleaning")."""

    min_chars: int = setting(1, "length: fewer characters on a side (spaces excluded) drop the pair")
    max_chars: int = setting(1000, "length: more characters on a side drop the pair")
    max_words: int = setting(250, "length: more whitespace-separated words on a side drop the pair")
    max_char_ratio: float = setting(3.0, "length_ratio: longer side / shorter side, in characters")
    max_word_ratio: float = setting(3.0, "length_ratio: the same in words")
    ratio_min_chars: int = setting(15, "length_ratio: judged only where the longer side has this many characters")
    max_similarity: float = setting(0.9, "identical: source and target this alike (difflib ratio, normalised) drop")
    min_letters: int = setting(2, "few_letters: fewer letters on a side drop the pair")
    max_symbol_share: float = setting(0.5, "mostly_symbols: a larger share of digits/punctuation/symbols drops it")
    language_min_chars: int = setting(20, "language: a side shorter than this is not judged (too short to tell)")
    languages: list[str] = field(
        default_factory=list,
        metadata={"help": "language: other codes the identifier may answer besides the run's own (e.g. [fr, es])"},
    )
    report_samples: int = setting(5, "dropped pairs per rule and corpus kept in cleaning.json")
    alignment_pairs: int = setting(50000, "alignment: the first pairs of each corpus its word tables learn from")
    alignment_max_mads: float = setting(
        3.0, "alignment: a pair scoring this many (scaled) median deviations below the median drops"
    )


@dataclass
class DataConfig:
    kind: str = setting("builtin", "builtin | multi30k | parallel_files | tsv | jsonl | hub")
    src_lang: str = setting("src", "language codes; file suffixes for multi30k")
    tgt_lang: str = "tgt"
    # Several directions in one model (docs/train.md, "Several directions in one model").
    directions: list[str] | None = field(
        default=None,
        metadata={
            "help": "src-tgt codes, e.g. [en-de,en-fr]: one model, a target-language tag per sentence;"
            " null or []: src_lang -> tgt_lang alone, untagged"
        },
    )
    lang_tag: str = setting(
        "source_prefix",
        "directions: source_prefix (>>de<< first source token, OPUS-MT) | decoder_start (mBART/NLLB) | both"
        " (Wu et al. 2021's T-ENC + T-DEC: for zero-shot) | language_codes (a pretrained NLLB-200/M2M-100 model's"
        " own: its source language's code first in the source, its target's after the decoder's start)",
    )
    sampling_temperature: float = setting(
        5.0, "directions: direction d drawn with p ~ pairs_d^(1/T), >= 1; 1: as the data is, inf: uniform"
    )
    dir: str | None = setting(
        None, "multi30k: the folder of train/val/test_2016_flickr.<lang>[.gz] (scripts/get_multi30k.py)"
    )
    # parallel_files: one sentence per line, plain or .gz; tsv/jsonl: set only train/valid/test.
    train_src: str | None = None
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    test_src: str | None = None
    test_tgt: str | None = None
    train: str | None = setting(None, 'tsv: "source<TAB>target" per line; jsonl: {"<src_key>": .., "<tgt_key>": ..}')
    valid: str | None = None
    test: str | None = None
    src_key: str = "src"
    tgt_key: str = "tgt"
    hub_name: str | None = setting(None, "hub: a datasets name, e.g. wmt14 (needs the network)")
    hub_subset: str | None = setting(None, "hub: e.g. de-en")
    # The built-in task: reverse a sequence of letters and upper-case it ("c a t" -> "T A C").
    task_train_size: int = 20000
    task_valid_size: int = 500
    task_test_size: int = 500
    task_min_len: int = 3
    task_max_len: int = 12
    task_alphabet: int = setting(20, "letters drawn from the first N of a-z")
    # Tokenization and filtering.
    tokenizer: str = setting(
        "bpe", "bpe | unigram (byte-level, `tokenizers`) | sentencepiece (Marian's, Argos's: exports to both)"
    )
    sentencepiece_type: str = setting("unigram", "data.tokenizer=sentencepiece: unigram | bpe")
    vocab_size: int = setting(8000, "per vocabulary (joint: shared); at least 260 (the 256 bytes + 4 special tokens)")
    joint_vocab: bool = setting(True, "one tokenizer for both languages (needed for model.share_embeddings)")
    prune_vocab: bool = setting(
        False,
        "init_from=<an NLLB-200, M2M-100 or mBART-50 directory>: keep only the ids the corpus uses (with the special"
        " tokens and the directions' language codes); exports map back to the whole vocabulary",
    )
    max_tokens: int = setting(128, "drop training pairs longer than this on either side")
    max_length_ratio: float = setting(3.0, "drop training pairs whose token counts differ by more than this factor")
    cache_dir: str | None = setting(None, "tokenized Arrow data + tokenizer; default ~/.cache/seq2seq")
    # Corpora too large to pre-tokenize: read and tokenize the training files on the fly, a buffer at a time.
    streaming: bool = False
    stream_buffer_pairs: int = setting(100_000, "pairs tokenized, length-sorted and shuffled together")
    stream_tokenizer_pairs: int = setting(1_000_000, "the first N training pairs train the tokenizer")
    # Several training corpora, each its own reader and weight (docs/corpora.md); validation and test
    # stay data.kind's. null or []: data.kind's training split alone, as before the key existed.
    corpora: list[CorpusConfig] | None = field(
        default=None,
        metadata={"help": "training corpora [{name, kind, weight, files...}]; null: data.kind's train split"},
    )
    clean: Any = setting(
        "none",
        "training pairs' cleaning rules: default (all) | hard (all but alignment) | none | [rule, ...] "
        "(docs/corpora.md); never valid/test",
    )
    clean_settings: CleanSettings = field(default_factory=CleanSettings)


@dataclass
class OptimConfig:
    name: str = setting("adam", "adam | adamw")
    # noam: factor*d^-0.5*min(s^-0.5, s*w^-1.5) | inverse_sqrt: lr*min(s/w, sqrt(w/s)) | linear_to_zero:
    # lr*min(s/w, 1-used), reaching zero when max_minutes or max_steps (whichever is nearer) is used up
    schedule: str = "noam"
    lr: float = setting(5e-4, "inverse_sqrt, linear_to_zero: peak learning rate, reached at the end of warmup")
    factor: float = setting(1.0, "noam: scale of the paper's schedule")
    warmup: int = setting(4000, "steps of rising learning rate")
    betas: list[float] = field(
        default_factory=lambda: [0.9, 0.98], metadata={"help": "Adam's decay rates of the moment estimates, in [0, 1)"}
    )
    eps: float = setting(1e-9, "Adam's denominator term, positive (0 divides by zero: NaN weights)")
    weight_decay: float = setting(0.0, ">= 0; adam: added to the gradient (L2), adamw: decoupled")
    clip_norm: float = setting(1.0, "max gradient norm; 0 turns clipping off")


@dataclass
class RecipeConfig:
    name: str = setting("", "what recipe=<name> and the log call it")
    min_updates: int = setting(0, "recipe=auto takes the first candidate expected to make at least this many updates")
    overrides: list[str] = field(
        default_factory=list, metadata={"help": "key=value, as on the command line (data.* excluded)"}
    )


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    batch_tokens: int = setting(4096, "padded tokens per batch (per rank): sentences x longest side incl. BOS/EOS")
    pad_to_multiple: int | None = setting(
        None,
        "batch widths rounded up to a multiple of this (few shapes to compile for); null: 8 with compile on a GPU, else 1",
    )
    accum_steps: int = setting(1, "batches whose gradients are summed before one update")
    max_steps: int | None = setting(100000, "updates; null: no limit")
    max_epochs: int | None = setting(None, "passes over the training data; null: no limit")
    max_minutes: float | None = setting(None, "wall-clock budget; the run saves and stops when it is spent")
    label_smoothing: float = 0.1
    # Fine-tuning a large pretrained model (init_from=): parts kept as they came (seq2seq/train/freezing.py).
    freeze: list[str] = field(
        default_factory=list,
        metadata={"help": "parts not trained: embeddings (tied: the output layer too) | encoder | decoder"},
    )
    trainable_top_layers: int | None = setting(
        None, "only the top N layers of each stack (and their final norms) train; the rest and the embeddings stay"
    )
    rdrop_alpha: float = setting(
        0.0,
        "R-Drop: each batch runs twice under independent dropout, + alpha x their symmetric KL"
        " (paper: 5 for translation); an update computes every row twice (halve batch_tokens to keep its rows); 0: off",
    )
    # The run's config records what auto chose (a resume continues with it).
    recipe: str = setting(
        "fixed", "auto: the first of recipes making its min_updates here, timed at start | fixed | a name"
    )
    recipes: list[RecipeConfig] = field(
        default_factory=list, metadata={"help": "recipe=auto's candidates, largest first"}
    )
    valid_every: int = setting(1000, "updates between validations (loss, BLEU, chrF)")
    valid_max_sentences: int | None = setting(
        None, "translate only the first N validation sentences for BLEU; null or 0: all of them"
    )
    save_every: int = setting(1000, "updates between periodic checkpoints")
    keep_checkpoints: int = setting(5, "periodic step_N.pt files kept (last and best are always kept)")
    best_metric: str = setting("bleu", "bleu | chrf | loss | accuracy (exact match)")
    patience: int | None = setting(None, "stop after this many validations without a better best_metric")
    target: float | None = setting(
        None, "stop once target_metric reaches this on validation (loss: falls to it); null: none"
    )
    target_metric: str = setting("accuracy", "bleu | chrf | loss | accuracy (exact match): what target is about")
    log_every: int = setting(
        50, "updates between train-metric refreshes (TensorBoard, tqdm); losses are read back from a GPU only then"
    )
    seed: int = setting(1234, "seeds Python, numpy and torch (rank r of torchrun: seed + r); in " + SEED_RANGE)
    device: str = setting("auto", "auto (cuda if present) | cpu | cuda | cuda:N")
    precision: str = setting(
        "auto", "auto (measured: bf16 where faster, else fp32) | fp32 | bf16 | fp16 (CUDA, grad scaler)"
    )
    threads: int | None = setting(
        None, "torch intra-op threads, positive, at most 4 per CPU; null: torch's default (one per core)"
    )
    deterministic: bool = setting(False, "torch.use_deterministic_algorithms, for bitwise-reproducible runs")
    compile: str = setting(
        "false",
        "true: the whole update compiled by torch.compile (Inductor) | false | auto (measured at the start: "
        "compiled where it makes more updates in the budget after its compile time)",
    )
    compile_mode: str = setting(
        "default",
        "torch.compile's mode with compile=true: default | reduce-overhead (CUDA graphs: the compiled forward and "
        "backward replayed in one launch each, per batch shape) | max-autotune",
    )
    # torchrun: how long a rank waits in a collective for the others before the run stops (a hung peer) ...
    dist_timeout_minutes: float = 10.0
    # ... and how long the others wait while rank 0 works alone: tokenizer training, tokenizing, validation.
    dist_wait_minutes: float = 360.0
    max_skipped_updates: int = setting(10, "consecutive non-finite losses/gradients before the run stops")
    resume: str | None = setting(None, "a run directory: continue it from its last checkpoint")
    overwrite: bool = setting(
        False,
        "a new run into a directory holding an earlier run: true removes the files a run writes (never others); false refuses",
    )
    init_from: str | None = setting(
        None, "a checkpoint or model.safetensors: a new run from its weights (fresh optimiser)"
    )
    progress: bool = setting(True, "show progress: a tqdm bar on a terminal, else a plain line every 30 s")
    attention_images: bool = setting(
        True, "attention heatmaps of one validation sentence in TensorBoard, each kind's last layer first"
    )
    attention_images_share: float = setting(0.01, "images stop while drawing them has cost this share of training time")
    debug: bool = setting(False, "show tracebacks instead of one-line errors")


@dataclass
class TranslateConfig:
    run: str | None = setting(
        None, "run directory (the weights written at the end of training, else best.pt, else last.pt)"
    )
    checkpoint: str | None = setting(
        None, "or a checkpoint file, with its tokenizer file(s) beside it or in its run dir"
    )
    input: str = setting("-", "file to translate, one sentence per line; - reads stdin")
    output: str = setting("-", "where translations go; - writes stdout")
    replace_output: bool = setting(False, "replace output= even though it exists and this command did not write it")
    reference: str | None = setting(None, "reference translations: print sacreBLEU and chrF to stderr")
    beam: int = setting(decoding.BEAM, "beam size; 1 is greedy search")
    length_penalty: float = setting(decoding.LENGTH_PENALTY, "alpha in score / length^alpha; 0 favours short outputs")
    max_len_a: float = setting(decoding.MAX_LEN_A, "output may have up to a * source length + b tokens")
    max_len_b: int = decoding.MAX_LEN_B
    nbest: int = setting(
        decoding.NBEST, 'hypotheses per input line; >1 prints "line ||| translation ||| score" lines (line from 0)'
    )
    batch_size: int = setting(decoding.BATCH_SIZE, "sentences decoded together (sorted by length first)")
    device: str = setting("auto", "auto (cuda if present) | cpu | cuda | cuda:N")
    precision: str = setting(
        decoding.PRECISION,
        "auto (fp32: a line's translation then never depends on its batch; a CTranslate2 export given as checkpoint="
        " keeps its own type) | fp32 | bf16 | fp16 (GPU) | int8 (CTranslate2 engine)",
    )
    threads: int | None = setting(
        None,
        "threads of either engine, positive, at most 4 per CPU (CTranslate2 on a CPU: two batches at once); null: one per core",
    )
    attention: str | None = setting(None, "directory for cross-attention heatmaps (PNG), one per sentence")
    sampling: bool = setting(
        decoding.SAMPLING, "sample instead of searching (back-translation): nbest samples per line, beam unused"
    )
    temperature: float = setting(
        decoding.TEMPERATURE, "sampling: divides the log-probabilities; < 1 sharper, > 1 flatter"
    )
    top_k: int = setting(decoding.TOP_K, "sampling: only the k most likely tokens (0: all)")
    top_p: float = setting(
        decoding.TOP_P, "sampling: only the most likely tokens up to this probability mass, in (0, 1]"
    )
    seed: int = setting(
        decoding.SEED, "sampling: the same seed, input and batch_size give the same samples; in " + SEED_RANGE
    )
    prefix: bool = setting(False, 'input lines are "source<TAB>target prefix": each translation starts with its prefix')
    tgt_lang: str | None = setting(
        None, "a multilingual model (data.directions): the language to write, e.g. fr (its tag is added)"
    )
    src_lang: str | None = setting(
        None, "the input's language: a direction the model was not trained on is then warned of (zero-shot)"
    )
    engine: str = setting(
        "auto", "auto (the run's ctranslate2/ export where it decodes as PyTorch) | torch | ctranslate2"
    )
    debug: bool = setting(False, "show tracebacks instead of one-line errors")


EXPORT_FORMATS = ("safetensors", "ctranslate2", "huggingface", "argos")
# CTranslate2's compute types a model can be converted to (format=ctranslate2 or argos).
CT2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


@dataclass
class ExportConfig:
    run: str | None = setting(None, "run directory (uses checkpoints/best.pt, else last.pt)")
    checkpoint: str | None = setting(
        None, "or a checkpoint file, with its tokenizer file(s) beside it or in its run dir"
    )
    output: str | None = setting(None, "directory to create (must not exist)")
    format: str = setting(
        "safetensors",
        "safetensors | ctranslate2 | huggingface (a MarianMTModel directory) | argos (an Argos Translate .argosmodel)",
    )
    quantization: str | None = setting(
        None, "ctranslate2 and argos only: int8, int8_float32, float16, bfloat16, ... (null: fp32)"
    )
    src_lang: str | None = setting(None, "argos only: with tgt_lang, the direction of a multilingual run to package")
    tgt_lang: str | None = setting(None, "argos only: the direction of a multilingual run to package (one per package)")
    debug: bool = setting(False, "show tracebacks instead of one-line errors")


def validate_export(cfg: Any) -> None:
    """seq2seq-export's settings, checked before torch is imported (a bad one: one line at once)."""
    if cfg.run is None and cfg.checkpoint is None:
        raise UserError("config error: run=None: give run=<run dir> or checkpoint=<file>")
    if not cfg.output:
        raise UserError(f"config error: output={cfg.output!r}: give output=<new directory>")
    if cfg.format not in EXPORT_FORMATS:
        raise UserError(f"config error: format={cfg.format!r}: must be one of {', '.join(EXPORT_FORMATS)}")
    if cfg.format == "argos" and not str(cfg.output).endswith(".argosmodel"):
        raise UserError(f"config error: output={cfg.output!r}: an Argos package's name ends in .argosmodel")
    for key in ("src_lang", "tgt_lang"):
        if getattr(cfg, key) is not None and cfg.format != "argos":
            raise UserError(
                f"config error: {key}={getattr(cfg, key)}: only for format=argos (a package is one pair; "
                "the other formats hold every direction)"
            )
    if cfg.quantization is not None:
        if cfg.format not in ("ctranslate2", "argos"):
            raise UserError(f"config error: quantization={cfg.quantization!r}: only for format=ctranslate2 or argos")
        if cfg.quantization not in CT2_QUANTIZATIONS:
            raise UserError(
                f"config error: quantization={cfg.quantization!r}: must be one of {', '.join(CT2_QUANTIZATIONS)}"
            )


@dataclass
class AverageConfig:
    run: str | None = setting(None, "a run directory: average its newest periodic checkpoints (checkpoints/step_N.pt)")
    checkpoints: str | None = setting(None, "or the files to average, comma-separated: a.pt,b.pt,c.pt")
    last: int = setting(5, "with run=: how many of the newest periodic checkpoints")
    output: str | None = setting(None, "default: <run>/checkpoints/averaged.pt, or averaged.pt beside the first file")
    force: bool = setting(False, "average even when the checkpoints reach back into the first half of the run")
    replace_output: bool = setting(False, "replace output= even though it exists and this command did not write it")


# How seq2seq-distill picks each line's target among the teacher's n-best: nothing (the teacher's best), or
# the hypothesis closest to the line's reference by sacreBLEU's sentence chrF or BLEU (seq2seq/distill/selection.py).
DISTILL_SELECT = ("none", "chrf", "bleu")
DISTILL_TRAINED_TARGETS = ("teacher", "references")
STUDENT_AS_TEACHER = "teacher"  # student=teacher: the teacher's own sizes (self-distillation, back-translation)


@dataclass
class DistillConfig:
    teacher: str | None = setting(
        None, "a run directory, or checkpoints of one run comma-separated (an ensemble): the model that translates"
    )
    output: str | None = setting(
        None, "a new folder for the distilled corpus, the student and result.json; one this command made resumes"
    )
    student: str = setting(
        "small", "the student's model preset: configs/model/<name>.yaml, or teacher (the teacher's own sizes)"
    )
    trained_targets: str = setting(
        "teacher",
        "the student's targets for the teacher's directions: teacher (its translations: distillation) | references",
    )
    back_translate: list[str] = field(
        default_factory=list,
        metadata={
            "help": "directions the teacher was not trained on (zero-shot, e.g. [de-fr,fr-de]) that the student"
            " learns from back-translated pairs made through a pivot language (docs/distill.md)"
        },
    )
    beam: int = setting(decoding.BEAM, "the teacher's beam size as it translates the training corpus")
    nbest: int = setting(decoding.NBEST, "hypotheses per line the teacher keeps for select=; 1: its best alone")
    select: str = setting(
        "none", "none | chrf | bleu: each line's hypothesis with the highest sentence score against its reference"
    )
    min_score: float = setting(
        0.0,
        "drop a training line whose kept hypothesis scores below this against its reference (select's metric;"
        " chrf under select=none), 0-100; 0 keeps every line",
    )
    length_penalty: float = setting(decoding.LENGTH_PENALTY, "the teacher's length penalty")
    batch_size: int = setting(decoding.BATCH_SIZE, "sentences the teacher decodes together")
    chunk_lines: int = setting(
        1000, "lines translated between two saves of the progress: a killed run loses at most these"
    )
    threads: int | None = setting(None, "the teacher's threads while it translates; null: one per core")
    cache: str | None = setting(
        None, "where the teacher's translations are kept by teacher + corpus + settings; null: $SEQ2SEQ_CACHE/distill"
    )
    baseline: bool = setting(
        False, "also train the student on the original references for as many updates (does distillation pay?)"
    )
    check_language: bool = setting(
        True, "refuse training sources that py3langid reads as another language than the teacher's source"
    )
    speed_lines: int = setting(1000, "test lines each speed measurement decodes, the same for teacher and student")
    speed_threads: list[int] = field(
        default_factory=lambda: [1, 2], metadata={"help": "the thread counts decoding speed is measured on"}
    )
    debug: bool = setting(False, "show tracebacks instead of one-line errors")


def validate_distill(cfg: Any) -> None:
    """What the key=value types cannot say; the teacher, the corpus and the student's training settings
    are checked against each other by seq2seq.distill before anything is translated."""
    _check(cfg.teacher is not None, "teacher", None, "give teacher=<run directory> (or checkpoints of one run, a,b)")
    _check(cfg.output is not None, "output", None, "give output=<a new folder>")
    validate_search(teacher_search(cfg))
    _choice("select", cfg.select, DISTILL_SELECT)
    _check(cfg.nbest == 1 or cfg.select != "none", "nbest", cfg.nbest, "needs select=chrf or select=bleu to choose")
    _check(0.0 <= cfg.min_score <= 100.0, "min_score", cfg.min_score, "must be in [0, 100]")
    _choice("trained_targets", cfg.trained_targets, DISTILL_TRAINED_TARGETS)
    for name in cfg.back_translate:
        parse_direction(name, "back_translate")
    _check(cfg.chunk_lines > 0, "chunk_lines", cfg.chunk_lines, "must be positive")
    _check(cfg.threads is None or cfg.threads > 0, "threads", cfg.threads, "must be positive or null")
    _check(cfg.speed_lines > 0, "speed_lines", cfg.speed_lines, "must be positive")
    threads = list(cfg.speed_threads)
    _check(bool(threads) and all(t > 0 for t in threads), "speed_threads", threads, "must list positive counts")


# The keys of seq2seq-distill that set the teacher's search, each a translate key of the same name.
DISTILL_SEARCH_KEYS = ("beam", "nbest", "length_penalty", "batch_size")


def teacher_search(cfg: Any) -> TranslateConfig:
    """The search a DistillConfig asks of its teacher, as a translate config: checked by the rules of
    every way in (validate_search), the other keys the translate defaults."""
    return TranslateConfig(**{key: getattr(cfg, key) for key in DISTILL_SEARCH_KEYS})


def _translate_key(key: str, help: str | None = None) -> Any:
    """A key seq2seq-serve shares with seq2seq-translate: TranslateConfig's default, and its help unless
    the server's differs."""
    shared = TranslateConfig.__dataclass_fields__[key]
    return setting(shared.default, shared.metadata.get("help", "") if help is None else help)


@dataclass
class ServeConfig:
    run: str | None = _translate_key("run", "run directory (its export or its weights, as seq2seq-translate picks)")
    checkpoint: str | None = _translate_key("checkpoint", "or a checkpoint file / CTranslate2 export directory")
    runs: list[str] = field(
        default_factory=list,
        metadata={"help": "further run directories served beside run= (run=A run=B is run=A runs=[B])"},
    )
    host: str = setting("127.0.0.1", "loopback; 0.0.0.0 (every interface) is the user's explicit choice")
    port: int = setting(5000, "LibreTranslate's port; 0 picks a free one (logged)")
    beam: int = _translate_key("beam", "beam size of /translate (and /v1/translate unless it sets one); 1 is greedy")
    length_penalty: float = _translate_key("length_penalty")
    max_len_a: float = _translate_key("max_len_a")
    max_len_b: int = _translate_key("max_len_b")
    batch_size: int = _translate_key("batch_size", "sentences decoded together within one gathered batch")
    device: str = _translate_key("device")
    precision: str = _translate_key("precision")
    threads: int | None = _translate_key("threads")
    engine: str = _translate_key("engine")
    max_batch_tokens: int = setting(4096, "source tokens of the requests gathered into one decoded batch")
    max_wait_ms: float = setting(20.0, "longest a request waits for others to join its batch")
    max_request_lines: int = setting(128, "more lines in one request: 413")
    max_line_chars: int = setting(2000, "a longer line (each line of a string counts alone): 413")
    max_beam: int = setting(32, "largest beam, nbest or alternatives + 1 a request may ask for (400 beyond)")
    max_file_bytes: int = setting(5_000_000, "largest file /translate_file takes: 413 beyond")
    cors_origins: list[str] = field(
        default_factory=lambda: ["*"],
        metadata={"help": "origins whose web pages may call the server (CORS); [] for none, * for any"},
    )
    drain_seconds: float = setting(20.0, "after SIGTERM: longest in-flight requests have; still waiting: 503")
    receive_seconds: float = setting(
        10.0, "a request's head must arrive within this, and its body pause no longer: else 408, connection closed"
    )
    api_keys_file: str | None = setting(None, "one key per line; then every request needs one of them (else 403)")
    source_lang: str | None = setting(
        None, "language codes of /languages; null: the run's data.src_lang (a multilingual run: its directions)"
    )
    target_lang: str | None = setting(None, "null: the run's data.tgt_lang")
    debug: bool = setting(False, "show tracebacks instead of one-line errors; log each batch")


# The keys seq2seq-serve shares with seq2seq-translate (their defaults are TranslateConfig's): the
# settings /translate decodes with, read off the two schemas.
SERVE_TRANSLATE_KEYS = tuple(
    f.name for f in dataclasses.fields(ServeConfig) if f.name in {g.name for g in dataclasses.fields(TranslateConfig)}
)


def as_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config, whether a DictConfig (from Hydra) or a dataclass (from code)."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return OmegaConf.to_container(cfg, resolve=True)


def data_config(settings: dict[str, Any]) -> DataConfig:
    """A DataConfig from a plain dict (`as_dict`'s, or a checkpoint's config["data"]), its nested
    corpora and clean_settings rebuilt as dataclasses; keys a newer version added keep their defaults."""
    settings = dict(settings)
    if isinstance(settings.get("clean_settings"), dict):
        settings["clean_settings"] = CleanSettings(**settings["clean_settings"])
    if settings.get("corpora"):
        settings["corpora"] = [c if isinstance(c, CorpusConfig) else CorpusConfig(**c) for c in settings["corpora"]]
    return DataConfig(**settings)


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore  # here: seq2seq-translate mostly runs without Hydra

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="translate_schema", node=TranslateConfig)
    store.store(name="serve_schema", node=ServeConfig)


def _check(ok: bool, key: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigValueError(f"config error: {key}={value!r}: {why}")


def _finite(value: float) -> bool:
    """NaN fails every comparison, so `x > 0` already refuses it; infinity passes them and must be named."""
    return math.isfinite(value)


def _check_type(key: str, value: Any, kind: type) -> None:
    """A value of the type the schema gives `key`, for settings that come from Python rather than through
    the schema (the Translator's keyword arguments): bool is not an int, "5" is not a beam."""
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ConfigTypeError(f"config error: {key}={value!r}: must be {'a number' if kind is float else 'an integer'}")


def _check_seed(key: str, seed: int) -> None:
    _check(0 <= seed <= MAX_SEED, key, seed, f"must be in [0, {MAX_SEED}] (what numpy and CTranslate2 take)")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
COMPILE_SETTINGS = ("true", "false", "auto")


def compile_setting(value: Any) -> str:
    """`compile` as one of COMPILE_SETTINGS: a boolean (compile=true on the command line, a config of
    the days it was one, Python's True) reads as "true" or "false"."""
    return str(value).lower()


def compiles(cfg: Any) -> bool:
    """Whether the update is compiled: compile=true (auto is decided before anything is built)."""
    return compile_setting(cfg.compile) == "true"


def _choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    _check(value in allowed, key, value, f"must be one of {', '.join(allowed)}")


def validate_model(m: ModelConfig, prefix: str = "model") -> None:
    for name in ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers", "max_positions"):
        _check(getattr(m, name) > 0, f"{prefix}.{name}", getattr(m, name), "must be positive")
    _check(m.d_model % m.heads == 0, f"{prefix}.d_model", m.d_model, f"must be divisible by {prefix}.heads={m.heads}")
    # A position table of max_positions x d_model is built whole: 1e8 positions would exhaust memory.
    _check(
        m.max_positions <= MAX_POSITIONS, f"{prefix}.max_positions", m.max_positions, f"must be at most {MAX_POSITIONS}"
    )
    _check(m.d_model % 2 == 0, f"{prefix}.d_model", m.d_model, "must be even (sinusoidal positions pair sin/cos)")
    for name in DROPOUT_KEYS:
        _check(0.0 <= getattr(m, name) < 1.0, f"{prefix}.{name}", getattr(m, name), "must be in [0, 1)")
    _choice(f"{prefix}.activation", m.activation, ("relu", "gelu", "silu"))
    _choice(f"{prefix}.positions", m.positions, ("sinusoidal", "learned"))
    _choice(f"{prefix}.sinusoid_layout", m.sinusoid_layout, ("interleaved", "split", "fairseq"))
    _choice(f"{prefix}.decoder_start", m.decoder_start, ("bos", "pad", "eos"))
    layer = m.encoder_drop_residual_layer
    _check(
        layer is None or 0 <= layer < m.encoder_layers,
        f"{prefix}.encoder_drop_residual_layer",
        layer,
        f"must be null or an encoder layer's index, 0 to {prefix}.encoder_layers-1 ({m.encoder_layers - 1})",
    )


def validate_device(device: Any) -> None:
    _check(isinstance(device, str), "device", device, "must be auto, cpu, cuda or cuda:N")
    _check(bool(re.fullmatch(r"auto|cpu|cuda(:\d+)?", device)), "device", device, "must be auto, cpu, cuda or cuda:N")


def _check_device_and_threads(cfg: Any) -> None:
    """device= and threads=, which training and both translation engines share."""
    validate_device(cfg.device)
    if cfg.threads is not None:  # the Python API's threads=1.5 reached CTranslate2's constructor
        _check_type("threads", cfg.threads, int)
    # 0 is refused rather than read as "all cores": null says that, and torch itself refuses 0.
    why = "must be positive, or null for the default (one thread per core)"
    _check(cfg.threads is None or cfg.threads > 0, "threads", cfg.threads, why)
    cpus = os.cpu_count() or 1
    most = THREADS_PER_CPU * cpus
    _check(
        cfg.threads is None or cfg.threads <= most,
        "threads",
        cfg.threads,
        f"must be at most {most} ({THREADS_PER_CPU} x this machine's {cpus} CPUs)",
    )


def validate_optim(o: OptimConfig) -> None:
    """Every optimiser key: an eps of 0 divides by zero (NaN weights), a negative one or a negative
    weight decay trains backwards or not at all, and an infinite value makes every weight NaN."""
    _choice("optim.name", o.name, ("adam", "adamw"))
    _choice("optim.schedule", o.schedule, ("noam", "inverse_sqrt", "linear_to_zero"))
    _check(o.warmup > 0, "optim.warmup", o.warmup, "must be positive (the schedules divide by it)")
    for key in ("lr", "factor", "eps"):
        value = getattr(o, key)
        _check(value > 0 and _finite(value), f"optim.{key}", value, "must be positive and finite")
    for key in ("weight_decay", "clip_norm"):
        value = getattr(o, key)
        _check(value >= 0 and _finite(value), f"optim.{key}", value, "must be >= 0 and finite")
    _check(len(o.betas) == 2 and all(0 <= b < 1 for b in o.betas), "optim.betas", list(o.betas), "two values in [0, 1)")


def check_cuda_device(device: str, gpus: int) -> None:
    """device=cuda or cuda:N against the GPUs the engine at hand sees (torch's or CTranslate2's): one
    message for training and both translation engines, before anything asks CUDA for a GPU."""
    kind, _, index = str(device).partition(":")
    if kind != "cuda":
        return
    if gpus == 0:
        raise UserError(f"device={device}: CUDA is not available on this machine (use device=auto or cpu)")
    if int(index or 0) >= gpus:
        raise UserError(
            f"device={device}: this machine has {gpus} GPU{'s' if gpus > 1 else ''} (cuda:0 to cuda:{gpus - 1})"
        )


FREEZABLE = ("embeddings", "encoder", "decoder")


def freezes_embeddings(parts: Any, top_layers: int | None) -> bool:
    """Whether freeze= (`parts`) and trainable_top_layers= freeze the embeddings (and a tied output
    layer): named, or by trainable_top_layers, which trains the top layers alone. The one rule that
    seq2seq.train.freezing applies and validate_train checks against."""
    return "embeddings" in parts or top_layers is not None


def validate_train(cfg: Any) -> None:
    """Checks a composed TrainConfig (DictConfig or dataclass) beyond its types."""
    validate_model(cfg.model)
    _check_device_and_threads(cfg)
    d, o = cfg.data, cfg.optim
    _choice("data.kind", d.kind, ("builtin", "multi30k", "parallel_files", "tsv", "jsonl", "hub"))
    _choice("data.tokenizer", d.tokenizer, ("bpe", "unigram", "sentencepiece"))
    _choice("data.sentencepiece_type", d.sentencepiece_type, ("unigram", "bpe"))
    _check(
        d.vocab_size >= BYTE_VOCABULARY_FLOOR,
        "data.vocab_size",
        d.vocab_size,
        f"must be at least {BYTE_VOCABULARY_FLOOR} (every byte-level vocabulary holds the 256 bytes and 4 special tokens)",
    )
    _check(d.max_tokens > 0, "data.max_tokens", d.max_tokens, "must be positive")
    for part in cfg.freeze or []:
        _choice("freeze", part, FREEZABLE)
    top = cfg.trainable_top_layers
    fewest = min(cfg.model.encoder_layers, cfg.model.decoder_layers)
    _check(top is None or 0 <= top <= fewest, "trainable_top_layers", top, f"must be null or 0 to {fewest} (layers)")
    # Both stacks whole, and the embeddings (named, or by trainable_top_layers): no weight would train,
    # and the first update's backward failed inside torch.
    parts = set(cfg.freeze or [])
    everything = {"encoder", "decoder"} <= parts and freezes_embeddings(parts, top)
    _check(not everything, "freeze", list(cfg.freeze), "freezes every weight, so nothing would train; leave a part out")
    validate_pruning(d, cfg.init_from)
    validate_directions(d)
    _check(d.max_length_ratio >= 1.0, "data.max_length_ratio", d.max_length_ratio, "must be at least 1")
    _check(d.stream_buffer_pairs > 0, "data.stream_buffer_pairs", d.stream_buffer_pairs, "must be positive")
    _check(d.stream_tokenizer_pairs > 0, "data.stream_tokenizer_pairs", d.stream_tokenizer_pairs, "must be positive")
    _check(
        d.max_tokens + 2 <= cfg.model.max_positions,
        "data.max_tokens",
        d.max_tokens,
        f"plus BOS/EOS must fit model.max_positions={cfg.model.max_positions}",
    )
    if d.kind == "builtin":
        _check(
            0 < d.task_min_len <= d.task_max_len, "data.task_min_len", d.task_min_len, "must be in [1, task_max_len]"
        )
        _check(2 <= d.task_alphabet <= 26, "data.task_alphabet", d.task_alphabet, "must be in [2, 26]")
        _check(d.task_train_size > 0, "data.task_train_size", d.task_train_size, "must be positive")
        _check(d.task_valid_size > 0, "data.task_valid_size", d.task_valid_size, "must be positive")
        _check(d.task_test_size >= 0, "data.task_test_size", d.task_test_size, "must be >= 0")
    if d.kind == "multi30k":
        why = "multi30k needs the folder of its files (python scripts/get_multi30k.py <folder> fetches them)"
        _check(d.dir is not None, "data.dir", d.dir, why)
    # With data.corpora the training pairs come from them; data.kind's files give validation and test.
    train_keys = () if d.corpora else ("train_src", "train_tgt", "train")
    if d.kind == "parallel_files":
        for key in ("train_src", "train_tgt", "valid_src", "valid_tgt"):
            if key.startswith("valid") or key in train_keys:
                _check(getattr(d, key) is not None, f"data.{key}", None, "parallel_files needs it")
    if d.kind in ("tsv", "jsonl"):
        for key in ("train", "valid"):
            if key == "valid" or key in train_keys:
                _check(getattr(d, key) is not None, f"data.{key}", None, f"{d.kind} needs it")
    validate_corpora(d)
    if d.kind == "hub":
        _check(d.hub_name is not None, "data.hub_name", None, "hub needs a dataset name")
    _check(
        d.joint_vocab or not cfg.model.share_embeddings,
        "model.share_embeddings",
        True,
        "needs data.joint_vocab=true (one embedding matrix cannot serve two vocabularies)",
    )
    _check(
        o.schedule != "linear_to_zero" or cfg.max_minutes is not None or cfg.max_steps is not None,
        "optim.schedule",
        o.schedule,
        "decays to zero at the end of the budget: set max_minutes or max_steps",
    )
    validate_optim(o)
    _check(cfg.batch_tokens > 0, "batch_tokens", cfg.batch_tokens, "must be positive")
    _check(
        cfg.batch_tokens >= d.max_tokens + 2,
        "batch_tokens",
        cfg.batch_tokens,
        f"must hold at least one sentence of data.max_tokens={d.max_tokens} (+BOS/EOS)",
    )
    _check(cfg.accum_steps > 0, "accum_steps", cfg.accum_steps, "must be positive")
    _check(
        cfg.pad_to_multiple is None or cfg.pad_to_multiple > 0,
        "pad_to_multiple",
        cfg.pad_to_multiple,
        "must be positive or null",
    )
    _check(cfg.max_steps is None or cfg.max_steps > 0, "max_steps", cfg.max_steps, "must be positive or null")
    _check(cfg.max_epochs is None or cfg.max_epochs > 0, "max_epochs", cfg.max_epochs, "must be positive or null")
    _check(
        cfg.max_minutes is None or (cfg.max_minutes > 0 and _finite(cfg.max_minutes)),
        "max_minutes",
        cfg.max_minutes,
        "must be positive and finite, or null",
    )
    _check(0.0 <= cfg.label_smoothing < 1.0, "label_smoothing", cfg.label_smoothing, "must be in [0, 1)")
    _check(
        cfg.rdrop_alpha >= 0.0 and _finite(cfg.rdrop_alpha), "rdrop_alpha", cfg.rdrop_alpha, "must be >= 0 and finite"
    )
    _check(
        cfg.rdrop_alpha == 0.0 or any(getattr(cfg.model, name) > 0 for name in DROPOUT_KEYS),
        "rdrop_alpha",
        cfg.rdrop_alpha,
        "needs dropout: with every model dropout at 0 the two passes agree and the term is 0",
    )
    _check(cfg.valid_every > 0, "valid_every", cfg.valid_every, "must be positive")
    # A slice's end: -1 would drop the last sentence rather than mean anything.
    why = "must be >= 0 (0 or null: every validation sentence)"
    _check(
        cfg.valid_max_sentences is None or cfg.valid_max_sentences >= 0,
        "valid_max_sentences",
        cfg.valid_max_sentences,
        why,
    )
    _check(cfg.log_every > 0, "log_every", cfg.log_every, "must be positive")
    _check_seed("seed", cfg.seed)
    _check(cfg.save_every > 0, "save_every", cfg.save_every, "must be positive")
    _check(cfg.keep_checkpoints >= 0, "keep_checkpoints", cfg.keep_checkpoints, "must be >= 0")
    _choice("best_metric", cfg.best_metric, ("bleu", "chrf", "loss", "accuracy"))
    _choice("precision", cfg.precision, ("auto", "fp32", "bf16", "fp16"))
    _choice("compile", compile_setting(cfg.compile), COMPILE_SETTINGS)
    _choice("compile_mode", cfg.compile_mode, COMPILE_MODES)
    _check(cfg.patience is None or cfg.patience > 0, "patience", cfg.patience, "must be positive or null")
    for key in ("dist_timeout_minutes", "dist_wait_minutes"):  # a timedelta of infinite minutes overflows
        _check(
            getattr(cfg, key) > 0 and _finite(getattr(cfg, key)), key, getattr(cfg, key), "must be positive and finite"
        )
    _choice("target_metric", cfg.target_metric, ("bleu", "chrf", "loss", "accuracy"))
    if cfg.target is not None and cfg.target_metric != "loss":
        _check(0 < cfg.target <= 100, "target", cfg.target, f"{cfg.target_metric} is a percentage: must be in (0, 100]")
    _check(
        cfg.target is None or (cfg.target > 0 and _finite(cfg.target)), "target", cfg.target, "must be positive or null"
    )
    _check(cfg.attention_images_share >= 0, "attention_images_share", cfg.attention_images_share, "must be >= 0")
    _check(cfg.max_skipped_updates > 0, "max_skipped_updates", cfg.max_skipped_updates, "must be positive")
    check_weights_source(cfg.resume, cfg.init_from)


# An ISO 639-1 or 639-3 code, optionally with a script or region (zh_Hant, pt_BR): no "-", which
# separates a direction's two codes, and nothing a file name or a >>tag<< cannot hold.
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(_[A-Za-z0-9]{2,4})?")
# data.src_lang/tgt_lang of one direction: also a dataset's own keys (a hub dataset's "source") and the
# built-in task's placeholders (src, tgt), so not ISO-checked; but no "-", space or empty name.
LANGUAGE_KEY = re.compile(r"[A-Za-z0-9_]+")
LANG_TAG_PLACES = ("source_prefix", "decoder_start", "both", "language_codes")
# The codes of a pretrained model's languages that ISO 639 (pycountry) does not list, accepted as its
# codes are: NLLB-200's South Levantine Arabic (ajp_Arab: ISO 639-3 merged ajp into apc in 2023) and
# M2M-100's Northern Sotho (ns, ISO 639-3 nso). Every other code of NLLB-200, M2M-100 and mBART-50 is ISO.
PRETRAINED_MODEL_CODES = frozenset({"ajp", "ns"})


def parse_direction(text: Any, key: str = "data.directions") -> tuple[str, str]:
    """ "en-de" -> ("en", "de"); a malformed entry of `key` is a one-line error naming it."""
    src, sep, tgt = str(text).partition("-")
    _check(
        bool(sep) and bool(LANGUAGE_CODE.fullmatch(src)) and bool(LANGUAGE_CODE.fullmatch(tgt)),
        key,
        text,
        "each entry is src-tgt with language codes of 2-3 lower-case letters (optionally _Script), e.g. en-de",
    )
    _check(src != tgt, key, text, "source and target language must differ")
    for code in (src, tgt):
        base = code.partition("_")[0]
        why = f"{base} is not an ISO 639-1 or 639-3 language code (e.g. de or deu)"
        _check(_is_iso_639(base), key, text, why)
    return src, tgt


def _is_iso_639(code: str) -> bool:
    """Whether pycountry knows `code` as a two-letter (639-1) or three-letter (639-3) language code
    (or it is one a pretrained model names a language by: PRETRAINED_MODEL_CODES)."""
    if code in PRETRAINED_MODEL_CODES:
        return True
    import pycountry  # here: only a run with data.directions pays for its tables

    key = "alpha_2" if len(code) == 2 else "alpha_3"
    return pycountry.languages.get(**{key: code}) is not None


def validate_pruning(d: Any, init_from: str | None) -> None:
    """data.prune_vocab: only for a pretrained model's own vocabulary of many languages (whose layout,
    data.lang_tag=language_codes, init_from= has set by now), counted from the whole corpus."""
    if not d.prune_vocab:
        return
    why = "prunes the vocabulary of an NLLB-200, M2M-100 or mBART-50 model given to init_from=; " + (
        f"init_from={init_from} is not one" if init_from else "this run trains its own tokenizer"
    )
    _check(d.lang_tag == LANG_TAG_PLACES[-1], "data.prune_vocab", True, why)
    why = "counts the ids to keep in the whole corpus before training; set data.streaming=false"
    _check(not d.streaming, "data.prune_vocab", True, why)


def validate_directions(d: Any) -> None:
    """data.directions, data.lang_tag and data.sampling_temperature (checked whether or not directions
    are given: a bad value is a mistake either way)."""
    _choice("data.lang_tag", d.lang_tag, LANG_TAG_PLACES)
    temperature = d.sampling_temperature
    why = "must be >= 1 (1: as the data is; larger: flatter; inf: uniform)"
    _check(temperature >= 1.0, "data.sampling_temperature", temperature, why)
    for key in ("src_lang", "tgt_lang"):  # a direction's name, a file suffix, a dataset's key: never empty
        value = getattr(d, key)
        why = "must be a language code (en, de, zh_Hant): letters, digits and _ alone (a direction is src-tgt)"
        _check(bool(LANGUAGE_KEY.fullmatch(str(value))), f"data.{key}", value, why)
        # A YAML file's bare no (Norwegian), yes, on or off is a boolean, which the text key holds as a word.
        why = "a YAML boolean, not a language: a bare no, yes, on or off in a config file is one; quote it ('no')"
        _check(str(value) not in ("True", "False"), f"data.{key}", value, why)
    directions = list(d.directions or [])
    pairs = [parse_direction(entry) for entry in directions]
    repeated = sorted({f"{s}-{t}" for s, t in pairs if pairs.count((s, t)) > 1})
    _check(not repeated, "data.directions", directions, f"lists {', '.join(repeated)} more than once")
    if pairs:
        _check(not d.streaming, "data.streaming", True, "reads one direction; set it false with data.directions")
        _check(d.kind != "builtin", "data.kind", d.kind, "the built-in task has one direction: unset data.directions")


# data.clean's rules, in the order a pair meets them (seq2seq/data/cleaning.py): the first that matches
# is the one a dropped pair is counted under; `default` is all of them but the opt-in ones.
CLEAN_RULES = (
    "control_chars",
    "length",
    "length_ratio",
    "few_letters",
    "mostly_symbols",
    "markup",
    "identical",
    "duplicate",
    "near_duplicate",
    "language",
    "alignment",
)
# data.clean=hard: the rules that judge a pair by itself (and the pairs kept before it), as
# bicleaner-hardrules' are; default adds `alignment`, which learns word tables from each corpus's head
# before its first pair is judged (docs/corpora.md gives each one's pairs a second).
HARD_CLEAN_RULES = tuple(rule for rule in CLEAN_RULES if rule != "alignment")
DEFAULT_CLEAN_RULES = CLEAN_RULES
CLEAN_SETS = {"default": DEFAULT_CLEAN_RULES, "hard": HARD_CLEAN_RULES, "none": ()}
CORPUS_KINDS = ("parallel_files", "tsv", "jsonl", "multi30k", "hub")
# What each kind of corpus must name, in data.corpora.
CORPUS_FILES = {
    "parallel_files": ("train_src", "train_tgt"),
    "tsv": ("train",),
    "jsonl": ("train",),
    "multi30k": ("dir",),
    "hub": ("hub_name",),
}


def clean_rules(value: Any, key: str = "data.clean") -> tuple[str, ...]:
    """data.clean (or a corpus's clean) as the rules it names, in CLEAN_RULES' order: a set's name
    (default, hard, none; also inside a list: `[hard, alignment]`) stands for its rules; an unknown name
    is a one-line error naming `key`."""
    if isinstance(value, str):
        _choice(key, value, tuple(CLEAN_SETS))
        return CLEAN_SETS[value]
    names = [str(name) for name in value]
    unknown = [name for name in names if name not in CLEAN_RULES and name not in CLEAN_SETS]
    sets = ", ".join(CLEAN_SETS)
    _check(not unknown, key, names, f"{', '.join(unknown)}: not a rule; the rules: {sets}, {', '.join(CLEAN_RULES)}")
    named = {rule for name in names for rule in CLEAN_SETS.get(name, (name,))}
    return tuple(rule for rule in CLEAN_RULES if rule in named)


def validate_corpora(d: Any) -> None:
    """data.corpora (each entry's kind, files, weight and rules) and data.clean with its thresholds."""
    clean_rules(d.clean)
    c = d.clean_settings
    for key in ("max_chars", "max_words", "min_letters", "report_samples"):
        _check(getattr(c, key) >= 0, f"data.clean_settings.{key}", getattr(c, key), "must be >= 0")
    for key in ("max_char_ratio", "max_word_ratio"):
        _check(getattr(c, key) >= 1.0, f"data.clean_settings.{key}", getattr(c, key), "must be at least 1")
    for key in ("max_similarity", "max_symbol_share"):
        _check(0.0 <= getattr(c, key) <= 1.0, f"data.clean_settings.{key}", getattr(c, key), "must be in [0, 1]")
    _check(c.alignment_pairs >= 100, "data.clean_settings.alignment_pairs", c.alignment_pairs, "must be >= 100")
    _check(c.alignment_max_mads > 0, "data.clean_settings.alignment_max_mads", c.alignment_max_mads, "must be > 0")
    corpora = list(d.corpora or [])
    if not corpora:
        return
    _check(d.kind != "builtin", "data.kind", d.kind, "the built-in task is generated: it takes no data.corpora")
    for key in ("train_src", "train_tgt", "train"):
        why = "data.corpora lists the training pairs: move this file into it, or unset it"
        _check(getattr(d, key) is None, f"data.{key}", getattr(d, key), why)
    names = [corpus.name for corpus in corpora]
    for index, corpus in enumerate(corpora):
        where = f"data.corpora[{index}]"
        _check(bool(corpus.name), f"{where}.name", corpus.name, "every corpus needs a name (the log and report's)")
        _check(corpus.name not in names[:index], f"{where}.name", corpus.name, "names must be unique")
        _choice(f"{where}.kind", corpus.kind, CORPUS_KINDS)
        why = "must be positive and finite (each pair's showings per epoch)"
        _check(corpus.weight > 0 and _finite(corpus.weight), f"{where}.weight", corpus.weight, why)
        for key in CORPUS_FILES[corpus.kind]:
            _check(getattr(corpus, key) is not None, f"{where}.{key}", None, f"kind={corpus.kind} needs it")
        if corpus.clean is not None:
            clean_rules(corpus.clean, f"{where}.clean")


def check_weights_source(resume: str | None, init_from: str | None) -> None:
    """resume= and init_from= both say where the weights come from: a resumed run would drop init_from."""
    why = "cannot be combined with resume (a resumed run continues from its own last.pt)"
    _check(not (resume and init_from), "init_from", init_from, why)


# recipe=: a measured choice among the candidates, or the config as it is (seq2seq/train/recipe.py).
AUTO_RECIPE, FIXED_RECIPE = "auto", "fixed"
# A run's config groups: on the command line they choose YAML files; a resumed run refuses them.
TRAIN_GROUPS = ("model", "data", "optim", "experiment")


def parse_overrides(recipe: Any, index: int) -> dict[str, str]:
    """The recipe's `key=value` overrides as {key: value}; data.* cannot be one (the data is prepared
    before the recipe is chosen), nor recipe/recipes themselves."""
    parsed = {}
    for override in recipe.overrides:
        key, sep, value = str(override).partition("=")
        where = f"recipes[{index}].overrides"
        if not sep or not key:
            raise UserError(f"{where}: '{override}' is not key=value")
        if key.split(".")[0] in ("data", "recipe", "recipes"):
            raise UserError(f"{where}: '{key}' cannot be set by a recipe (it is decided before the recipe is chosen)")
        parsed[key] = value
    return parsed


def validate_recipes(cfg: Any) -> None:
    """recipe is auto, fixed or the name of one of recipes; every override names a key of the config."""
    names = [r.name for r in cfg.recipes]
    if not all(names) or any(name in (AUTO_RECIPE, FIXED_RECIPE) for name in names):
        raise UserError(f"recipes: every candidate needs a name other than auto and fixed, got {names}")
    if len(set(names)) != len(names):
        raise UserError(f"recipes: names must be unique, got {names}")
    allowed = (AUTO_RECIPE, FIXED_RECIPE, *names)
    if cfg.recipe not in allowed:
        raise UserError(f"recipe: '{cfg.recipe}' is not one of {', '.join(allowed)}")
    if cfg.recipe == AUTO_RECIPE and not names:
        raise UserError("recipe: auto needs candidates in recipes (see configs/experiment/multi30k_base.yaml)")
    for index, recipe in enumerate(cfg.recipes):
        for key in parse_overrides(recipe, index):
            if OmegaConf.select(cfg, key, default=KeyError) is KeyError:
                raise UserError(f"recipes[{index}].overrides: '{key}' is not a key of the training config")


# The settings of a search, with their types: what validate_search checks.
SEARCH_KEYS = {"beam": int, "nbest": int, "length_penalty": float, "max_len_a": float, "max_len_b": int}
SEARCH_KEYS |= {"batch_size": int, "seed": int}


def validate_search(cfg: Any) -> None:
    """The search settings that every way in shares: seq2seq-translate, the Python API's translators and
    seq2seq-serve's requests. `cfg` is a TranslateConfig, a DictConfig of one, or any object with the
    attributes of SEARCH_KEYS and `sampling` (true or a SamplingRule: sample; else search). Types are
    checked too: the Python API has no schema in front of it."""
    for key, kind in SEARCH_KEYS.items():
        _check_type(key, getattr(cfg, key), kind)
    _check(cfg.beam > 0, "beam", cfg.beam, "must be positive")
    if cfg.sampling:
        _check(cfg.nbest > 0, "nbest", cfg.nbest, "must be positive (samples per line)")
    else:
        _check(0 < cfg.nbest <= cfg.beam, "nbest", cfg.nbest, f"must be in [1, beam={cfg.beam}]")
    _check(cfg.batch_size > 0, "batch_size", cfg.batch_size, "must be positive")
    # NaN would score every hypothesis NaN and leave the n-best in no order.
    _check(_finite(cfg.length_penalty), "length_penalty", cfg.length_penalty, "must be finite")
    _check(cfg.max_len_a >= 0 and _finite(cfg.max_len_a), "max_len_a", cfg.max_len_a, "must be >= 0 and finite")
    _check(cfg.max_len_b >= 0, "max_len_b", cfg.max_len_b, "must be >= 0")
    _check_seed("seed", cfg.seed)


def validate_translate(cfg: Any) -> None:
    _check(cfg.run is not None or cfg.checkpoint is not None, "run", None, "give run=<run dir> or checkpoint=<file>")
    validate_search(cfg)
    ensemble = "," in str(cfg.checkpoint or "")
    _check(
        not (ensemble and cfg.attention), "attention", cfg.attention, "plots one model's attention, not an ensemble's"
    )
    _choice("precision", cfg.precision, ("auto", "fp32", "bf16", "fp16", "int8"))
    _choice("engine", cfg.engine, ("auto", "torch", "ctranslate2"))
    _check_device_and_threads(cfg)
    # Checked whether or not sampling=true: a bad value is a mistake either way (and the README says so).
    validate_sampling(cfg)


def validate_sampling(cfg: Any) -> None:
    """temperature, top_k and top_p: of a translate config, or of a SamplingRule given in Python."""
    for key, kind in (("temperature", float), ("top_k", int), ("top_p", float)):
        _check_type(key, getattr(cfg, key), kind)
    _check(cfg.temperature > 0 and _finite(cfg.temperature), "temperature", cfg.temperature, "must be > 0 and finite")
    _check(cfg.top_k >= 0, "top_k", cfg.top_k, "must be >= 0 (0 keeps every token)")
    _check(0 < cfg.top_p <= 1, "top_p", cfg.top_p, "must be in (0, 1]")


def serve_translate_config(cfg: Any) -> TranslateConfig:
    """The TranslateConfig of a ServeConfig: the settings /translate decodes with."""
    return TranslateConfig(**{key: getattr(cfg, key) for key in SERVE_TRANSLATE_KEYS})


def validate_serve(cfg: Any) -> None:
    validate_translate(serve_translate_config(cfg))
    validate_server(cfg)


def validate_server(cfg: Any) -> None:
    """The server's own keys of a ServeConfig (its decoding keys are validate_translate's)."""
    _check(0 <= cfg.port <= 65535, "port", cfg.port, "must be in [0, 65535] (0 picks a free port)")
    _check(bool(cfg.host), "host", cfg.host, "must name an interface (127.0.0.1 is loopback)")
    _check(cfg.max_batch_tokens > 0, "max_batch_tokens", cfg.max_batch_tokens, "must be positive")
    _check(cfg.max_wait_ms >= 0, "max_wait_ms", cfg.max_wait_ms, "must be >= 0")
    _check(cfg.max_request_lines > 0, "max_request_lines", cfg.max_request_lines, "must be positive")
    _check(cfg.max_line_chars > 0, "max_line_chars", cfg.max_line_chars, "must be positive")
    _check(cfg.max_beam >= cfg.beam, "max_beam", cfg.max_beam, f"must be at least beam={cfg.beam}")
    _check(cfg.max_file_bytes > 0, "max_file_bytes", cfg.max_file_bytes, "must be positive")
    _check(cfg.drain_seconds >= 0, "drain_seconds", cfg.drain_seconds, "must be >= 0")
    why = "must be positive and finite"
    _check(cfg.receive_seconds > 0 and _finite(cfg.receive_seconds), "receive_seconds", cfg.receive_seconds, why)


def keys_of_kind(schema: type, wanted: Callable[[Any], bool], prefix: str = "") -> list[str]:
    """The schema's keys whose type hint `wanted` takes, those of its nested configs included."""
    keys = []
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys.extend(keys_of_kind(kind, wanted, f"{prefix}{f.name}."))
        elif wanted(kind):
            keys.append(prefix + f.name)
    return keys


def str_keys(schema: type) -> list[str]:
    """The schema's keys whose values are text (paths, language codes, names)."""
    return keys_of_kind(schema, lambda kind: kind is str or kind == (str | None))


def list_keys(schema: type) -> list[str]:
    """The schema's keys whose values are lists (data.directions, back_translate, runs, ...)."""
    return keys_of_kind(
        schema, lambda kind: list in (typing.get_origin(kind), *map(typing.get_origin, typing.get_args(kind)))
    )


def as_typed_text(value: str) -> str | None:
    """A text key's value as Hydra's grammar reads it: as typed, `null` for none, quotes taken off.
    Read as YAML it was another thing: `tgt_lang=no` (Norwegian) False, `input=-` (standard input) a
    list, `output=#1` null."""
    if value == "null":
        return None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def typed_dotlist(arguments: list[str], schema: type) -> Any:
    """`key=value` arguments as a config to merge over `schema`'s: as OmegaConf.from_dotlist reads them
    (YAML: numbers, booleans, lists), but a text key's value as typed (as_typed_text)."""
    texts = str_keys(schema)
    given = OmegaConf.from_dotlist([a for a in arguments if a.partition("=")[0].lstrip("+") not in texts])
    for argument in (a for a in arguments if a.partition("=")[0].lstrip("+") in texts):
        key, _, value = argument.partition("=")
        OmegaConf.update(given, key.lstrip("+"), as_typed_text(value), force_add=True)
    return given
