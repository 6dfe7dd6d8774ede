"""`export(cfg)`: a training checkpoint as files for inference only.

format=safetensors: <output>/model.safetensors (the weights, no optimiser state; loading it runs no
code), config.json (model config, vocabulary sizes, special-token ids) and the tokenizer file(s).
`seq2seq-translate checkpoint=<output>` (or <output>/model.safetensors) translates with it.

format=ctranslate2: a CTranslate2 model directory (model.bin, config.json, vocabulary) built from
`ctranslate2.specs.TransformerSpec`, with the tokenizer file(s) beside it. Carried over exactly:
the position table (our sinusoids interleave sin/cos, so the table itself is stored, not CTranslate2's
built-in one), the sqrt(d_model) embedding scale, post- or pre-norm (with the final LayerNorm of each
stack), the activation, tied and shared embeddings (stored once, as aliases), LayerNorm epsilon, and
the special tokens: source = tokens + "</s>", the decoder starts from "<s>".

The output directory is written under a temporary name beside it and renamed at the end, so a
failure leaves nothing behind; an existing output directory is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import check_vocabulary, load_checkpoint, model_config_of
from seq2seq.artifacts.freshness import checkpoint_record
from seq2seq.artifacts.path_kind import DECODING_FILE, WEIGHTS_CONFIG, WEIGHTS_FILE, WEIGHTS_FORMAT
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, INFERENCE_DIR, RunDir
from seq2seq.config import ModelConfig, TranslateConfig, UserError, setting
from seq2seq.data.sentencepiece import SentencePieceTokenizers
from seq2seq.data.tokenizer import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK, UNK_ID, Tokenizers
from seq2seq.inference.loading import load_tokenizers
from seq2seq.model.embedding import sinusoidal_table

FORMATS = ("safetensors", "ctranslate2", "huggingface", "argos")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
LAYER_NORM_EPS = torch.nn.LayerNorm(1).eps  # every LayerNorm of the model is built with torch's default


@dataclass
class ExportConfig:
    run: str | None = setting(None, "run directory (uses checkpoints/best.pt, else last.pt)")
    checkpoint: str | None = setting(None, "or a checkpoint file, with tokenizer.json beside it or in its run dir")
    output: str | None = setting(None, "directory to create (must not exist)")
    format: str = setting(
        "safetensors",
        "safetensors | ctranslate2 | huggingface (a MarianMTModel directory) | argos (an Argos Translate .argosmodel)",
    )
    quantization: str | None = setting(
        None, "ctranslate2 and argos only: int8, int8_float32, float16, bfloat16, ... (null: fp32)"
    )
    debug: bool = setting(False, "show tracebacks instead of one-line errors")


def tied_aliases(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(alias, stored name) pairs of the state dict entries that are one tensor under two names,
    in the order they are restored (an alias may point at an earlier alias)."""
    aliases = []
    if model.get("share_embeddings"):
        aliases.append(("tgt_embed.weight", "src_embed.weight"))
    if model.get("tie_output", True):
        aliases.append(("output.weight", "tgt_embed.weight"))
    return aliases


def export(cfg: Any) -> tuple[Path, ModelConfig]:
    """Writes the export described by `cfg` (an ExportConfig or DictConfig); returns its directory and
    the model's config."""
    _check_config(cfg)
    output = Path(cfg.output)
    if output.exists() or output.is_symlink():
        raise UserError(f"{output}: already exists; give output= a new directory")
    path = Path(cfg.checkpoint) if cfg.checkpoint else RunDir(cfg.run).find_checkpoint()
    payload = load_checkpoint(path)
    tokenizers = load_tokenizers(path, cfg.run)
    model_cfg = _model_config(payload, path)
    check_vocabulary(payload, tokenizers, path)
    if cfg.format == "huggingface":  # a writer of its own: transformers writes the tokenizer files
        from seq2seq.interop.huggingface import huggingface_writer, model_card

        card = model_card(payload, cfg.run or str(path.parent.parent), isinstance(tokenizers, SentencePieceTokenizers))
        write_all = huggingface_writer(payload, model_cfg, tokenizers, path, card)
    elif cfg.format == "argos":  # one file, not a directory
        from seq2seq.interop.argos import argos_writer

        model = functools.partial(
            _ctranslate2_writer, payload, model_cfg, tokenizers, path, cfg.quantization, without_pad=True
        )
        argos_writer(payload, tokenizers, path, model)(output)
        return output, model_cfg
    else:
        write_all = _writer(cfg.format, payload, model_cfg, tokenizers, path, cfg.quantization)
    _write_directory(output, write_all)
    return output, model_cfg


# What training writes into its run directory at the end, for translation: directory name -> format.
RUN_EXPORTS = {INFERENCE_DIR: "safetensors", CTRANSLATE2_DIR: "ctranslate2"}


def remove_stale_export_directories(run_dir: Path) -> int:
    """Deletes what killed exports left beside a run's model/ and ctranslate2/ (their .NAME.*.tmp
    staging and .NAME.*.old directories); returns their total size. Only while holding the run's lock."""
    removed = 0
    for name in RUN_EXPORTS:
        for leftover in [*run_dir.glob(f".{name}.*.tmp"), *run_dir.glob(f".{name}.*.old")]:
            if leftover.is_dir() and not leftover.is_symlink():
                removed += sum(f.stat().st_size for f in leftover.rglob("*") if f.is_file())
                shutil.rmtree(leftover, ignore_errors=True)
    return removed


def write_run_exports(run_dir: Path, skip: tuple[str, ...] = ()) -> dict[str, Path | UserError]:
    """<run>/model/ (the weights alone, which `seq2seq-translate run=` loads instead of the checkpoint)
    and, when the ctranslate2 package is installed, <run>/ctranslate2/ (`seq2seq-translate
    checkpoint=<run>/ctranslate2`), both of the run's best checkpoint (else its last), read once. Each
    replaces an earlier one (a resumed run): the new directory is complete before the old one goes.
    Returns each export's directory, or the error that stopped it (the others are still written);
    those named in `skip` are left as they are."""
    remove_stale_export_directories(run_dir)
    path = RunDir(run_dir).find_checkpoint()
    payload = load_checkpoint(path)
    tokenizers = load_tokenizers(path, str(run_dir))
    model_cfg = _model_config(payload, path)
    written: dict[str, Path | UserError] = {}
    for name, fmt in RUN_EXPORTS.items():
        if name in skip:
            continue
        if fmt == "ctranslate2" and importlib.util.find_spec("ctranslate2") is None:
            continue  # an optional extra: pip install 'seq2seq[export]'
        try:
            _write_directory(run_dir / name, _writer(fmt, payload, model_cfg, tokenizers, path, None), replace=True)
            written[name] = run_dir / name
        except UserError as err:
            written[name] = err
    return written


def _writer(
    fmt: str,
    payload: dict[str, Any],
    model_cfg: ModelConfig,
    tokenizers: Tokenizers,
    path: Path,
    quantization: str | None,
) -> Callable[[Path], None]:
    """Writes the export in format `fmt` and the tokenizer into a directory; everything that can be
    refused is checked here, before any directory exists."""
    if fmt == "safetensors":
        write = _safetensors_writer(payload, model_cfg, path)
    else:
        write = _ctranslate2_writer(payload, model_cfg, tokenizers, path, quantization)

    def write_all(directory: Path) -> None:
        write(directory)
        tokenizers.save(directory)

    return write_all


def _check_config(cfg: Any) -> None:
    if cfg.run is None and cfg.checkpoint is None:
        raise UserError("config error: run=None: give run=<run dir> or checkpoint=<file>")
    if not cfg.output:
        raise UserError(f"config error: output={cfg.output!r}: give output=<new directory>")
    if cfg.format not in FORMATS:
        raise UserError(f"config error: format={cfg.format!r}: must be one of {', '.join(FORMATS)}")
    if cfg.format == "argos" and not str(cfg.output).endswith(".argosmodel"):
        raise UserError(f"config error: output={cfg.output!r}: an Argos package's name ends in .argosmodel")
    if cfg.quantization is not None:
        if cfg.format not in ("ctranslate2", "argos"):
            raise UserError(f"config error: quantization={cfg.quantization!r}: only for format=ctranslate2 or argos")
        if cfg.quantization not in CT2_QUANTIZATIONS:
            raise UserError(
                f"config error: quantization={cfg.quantization!r}: must be one of {', '.join(CT2_QUANTIZATIONS)}"
            )


def _model_config(payload: dict[str, Any], path: Path) -> ModelConfig:
    config = payload.get("config")
    model_cfg = model_config_of(config.get("model") if isinstance(config, dict) else None, path)
    return model_cfg


def _write_directory(output: Path, write: Callable[[Path], None], replace: bool = False) -> None:
    """Runs `write` on a temporary directory beside `output`, then renames it to `output` (with
    `replace`, an existing `output` is moved aside first and deleted once the new one is in place)."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent))
    except OSError as err:
        raise UserError(f"{output}: cannot create the output directory ({err.strerror or err})") from err
    try:
        mask = _umask()
        write(staging)
        for file in staging.iterdir():  # safetensors writes 0600; an export is an ordinary directory
            os.chmod(file, 0o666 & ~mask)
        os.chmod(staging, 0o777 & ~mask)  # mkdtemp makes it 0700
        if output.exists() and not replace:  # appeared while we were writing
            raise UserError(f"{output}: already exists; give output= a new directory")
        if output.exists():  # replace: the old one leaves under a temporary name, then goes
            old = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".old", dir=output.parent))
            os.rename(output, old / output.name)
            os.rename(staging, output)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, output)
    except UserError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except Exception as err:  # OSError, and the writers' own: safetensors' SafetensorError on a full disk
        shutil.rmtree(staging, ignore_errors=True)
        detail = getattr(err, "strerror", None) or (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{output}: could not write the export ({detail}); nothing was written") from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --- safetensors ------------------------------------------------------------------------------------


def _safetensors_writer(payload: dict[str, Any], model_cfg: ModelConfig, path: Path) -> Callable[[Path], None]:
    from safetensors.torch import save_file

    state = dict(payload["model"])
    model = dataclasses.asdict(model_cfg)
    aliases = tied_aliases(model)
    for alias, stored in aliases:
        if alias not in state or stored not in state or not torch.equal(state[alias], state[stored]):
            raise UserError(f"{path}: {alias} should be the same tensor as {stored} (model config) but is not")
    for alias, _ in aliases:
        del state[alias]
    # safetensors stores each tensor once, contiguous; the checkpoint's are the fp32 master weights.
    tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in state.items()}
    config = {
        "format": WEIGHTS_FORMAT,
        "model": model,
        "vocab": {
            **payload["vocab"],
            "pad_id": PAD_ID,
            "bos_id": BOS_ID,
            "eos_id": EOS_ID,
            "unk_id": UNK_ID,
        },
        "tied": [list(pair) for pair in aliases],
        **checkpoint_record(path, payload.get("step", -1)),  # which checkpoint: translation checks it is current
    }

    def write(directory: Path) -> None:
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": WEIGHTS_FORMAT})
        (directory / WEIGHTS_CONFIG).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")

    return write


# --- CTranslate2 ------------------------------------------------------------------------------------


def _ctranslate2_writer(
    payload: dict[str, Any],
    model_cfg: ModelConfig,
    tokenizers: Tokenizers,
    path: Path,
    quantization: str | None,
    without_pad: bool = False,
) -> Callable[[Path], None]:
    """Builds (and validates) the whole spec before anything is written. `without_pad`: pad (id 0) left
    out of the vocabularies and the weights, as CTranslate2's Marian converter leaves it out, for
    consumers that decode without suppressing it (Argos Translate); only for a Marian-style model,
    which starts from a zero vector rather than from pad's row."""
    try:
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError as err:
        raise UserError("format=ctranslate2 needs the ctranslate2 package: pip install 'seq2seq[export]'") from err
    activations = {  # F.gelu is erf-exact
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "silu": common_spec.Activation.SWISH,
    }
    if model_cfg.activation not in activations:
        raise UserError(f"{path}: model.activation={model_cfg.activation}: CTranslate2 has no such activation")
    state = payload["model"]

    def weight(name: str) -> Any:
        if name not in state:
            raise UserError(f"{path}: the checkpoint has no {name}")
        return state[name].detach().float().cpu().numpy()

    def vocabulary_rows(name: str) -> Any:  # (V, ...): one row per token
        return weight(name)[1:] if without_pad else weight(name)

    def linear(spec: Any, name: str) -> None:
        spec.weight = weight(f"{name}.weight")
        if f"{name}.bias" in state:
            spec.bias = weight(f"{name}.bias")

    def norm(spec: Any, name: str) -> None:
        spec.gamma, spec.beta = weight(f"{name}.weight"), weight(f"{name}.bias")

    def positions(name: str) -> Any:
        # Position p of a sequence reads row p, from 0, in both implementations.
        if model_cfg.positions == "learned":
            return weight(f"{name}.table")
        return sinusoidal_table(model_cfg.max_positions, model_cfg.d_model, model_cfg.sinusoid_layout).numpy()

    spec = transformer_spec.TransformerSpec.from_config(
        (model_cfg.encoder_layers, model_cfg.decoder_layers),
        model_cfg.heads,
        pre_norm=model_cfg.norm_first,  # pre-norm also brings the final LayerNorm of each stack, as ours
        activation=activations[model_cfg.activation],
    )
    encoder, decoder = spec.encoder, spec.decoder
    encoder.embeddings[0].weight = vocabulary_rows("src_embed.weight")
    decoder.embeddings.weight = vocabulary_rows("tgt_embed.weight")
    encoder.scale_embeddings = decoder.scale_embeddings = model_cfg.scale_embedding  # x sqrt(d_model), then positions
    encoder.position_encodings.encodings = positions("src_positions")
    decoder.position_encodings.encodings = positions("tgt_positions")
    decoder.projection.weight = vocabulary_rows("output.weight")  # tied: stored once as an alias
    if model_cfg.output_bias:  # Marian's final_logits_bias
        decoder.projection.bias = vocabulary_rows("output_bias")
    marian_start = model_cfg.decoder_start == "pad"
    if without_pad and not marian_start:
        raise UserError(f"{path}: model.decoder_start={model_cfg.decoder_start}: the decoder needs its start token")
    # As seq2seq.model.transformer: a Marian decoder starts from a zero vector (the token is then pad).
    decoder.start_from_zero_embedding = marian_start
    if model_cfg.norm_first:
        norm(encoder.layer_norm, "encoder_norm")
        norm(decoder.layer_norm, "decoder_norm")
    for i, layer in enumerate(encoder.layer):
        prefix = f"encoder_layers.{i}"
        norm(layer.self_attention.layer_norm, f"{prefix}.attn_residual.norm")
        linear(layer.self_attention.linear[0], f"{prefix}.self_attn.qkv_proj")  # fused [q; k; v], as CT2's
        linear(layer.self_attention.linear[1], f"{prefix}.self_attn.out_proj")
        _feed_forward(layer.ffn, prefix, norm, linear)
    for i, layer in enumerate(decoder.layer):
        prefix = f"decoder_layers.{i}"
        norm(layer.self_attention.layer_norm, f"{prefix}.self_residual.norm")
        linear(layer.self_attention.linear[0], f"{prefix}.self_attn.qkv_proj")
        linear(layer.self_attention.linear[1], f"{prefix}.self_attn.out_proj")
        norm(layer.attention.layer_norm, f"{prefix}.cross_residual.norm")
        linear(layer.attention.linear[0], f"{prefix}.cross_attn.q_proj")
        linear(layer.attention.linear[1], f"{prefix}.cross_attn.kv_proj")  # fused [k; v], as CT2's
        linear(layer.attention.linear[2], f"{prefix}.cross_attn.out_proj")
        _feed_forward(layer.ffn, prefix, norm, linear)

    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = PAD if marian_start else BOS  # as search.py starts every hypothesis
    if without_pad:
        spec.config.decoder_start_token = EOS  # any token: the start is a zero vector (as the converter's)
    spec.config.add_source_bos = False  # our source is its tokens + </s>, no <s>
    spec.config.add_source_eos = True
    skipped = 1 if without_pad else 0
    spec.register_source_vocabulary(_vocabulary(tokenizers.src, path, marian_start)[skipped:])
    spec.register_target_vocabulary(_vocabulary(tokenizers.tgt, path, marian_start)[skipped:])
    try:
        spec.validate()
        spec.optimize(quantization=quantization)  # aliases equal tensors (tied/shared), then quantizes
    except ValueError as err:
        raise UserError(f"{path}: CTranslate2 refused the model: {str(err).strip().splitlines()[0]}") from err

    # What CTranslate2's files do not say: what seq2seq-translate needs to decode as with the checkpoint,
    # and which checkpoint it was made from (translation checks that it is current).
    suppressed = [] if without_pad else [[PAD]] if marian_start else [[PAD], [BOS]]
    decoding = {
        "max_positions": model_cfg.max_positions,
        "ctranslate2_options": ctranslate2_options(model_cfg.max_positions, suppressed),
        **checkpoint_record(path, payload.get("step", -1)),
    }

    def write(directory: Path) -> None:
        spec.save(str(directory))
        (directory / DECODING_FILE).write_text(json.dumps(decoding) + "\n")

    return write


def ctranslate2_options(max_positions: int, suppressed: list[list[str]]) -> dict[str, Any]:
    """The options of `ctranslate2.Translator.translate_batch` under which it writes seq2seq-translate's
    lines (with its default beam and length penalty), recorded beside the model for those who call
    CTranslate2 themselves. The output budget is per line: translate the lines of one budget together."""
    defaults = TranslateConfig()
    rule = "min(int(max_len_a * (source tokens + 1) + max_len_b), max_positions) - 1, for each line"
    return {
        "beam_size": defaults.beam,
        "length_penalty": defaults.length_penalty,
        "min_decoding_length": 0,  # CTranslate2's default, 1, forbids the immediate </s> ours allows
        "max_input_length": max_positions,
        "max_decoding_length": {"max_len_a": defaults.max_len_a, "max_len_b": defaults.max_len_b, "rule": rule},
        "suppress_sequences": suppressed,
    }


def _feed_forward(spec: Any, prefix: str, norm: Callable, linear: Callable) -> None:
    norm(spec.layer_norm, f"{prefix}.ffn_residual.norm")
    linear(spec.linear_0, f"{prefix}.ffn.linear1")
    linear(spec.linear_1, f"{prefix}.ffn.linear2")


def _vocabulary(tokenizer: Any, path: Path, marian_start: bool) -> list[str]:
    """The tokens by id. CTranslate2 maps tokens to ids by name, so every id needs its own name.
    `marian_start`: a SentencePiece vocabulary, whose id 1 is an ordinary piece (it has no <s>)."""
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    expected = [PAD, tokens[1] if marian_start else BOS, EOS, UNK]
    if tokens[:4] != expected:
        raise UserError(f"{path}: the tokenizer's first ids are {tokens[:4]}, not {expected}")
    if None in tokens or len(set(tokens)) != len(tokens):
        raise UserError(f"{path}: the tokenizer's vocabulary has ids without a token or two ids for one token")
    return tokens
