"""CTranslate2 model directories (`seq2seq-export format=ctranslate2`, and <run>/ctranslate2/ that
training writes): the writer, and what the CTranslate2 engine reads of them beside CTranslate2 itself.

The writer builds a CTranslate2 model directory (model.bin, config.json, vocabulary) from
`ctranslate2.specs.TransformerSpec`; the tokenizer file(s) go beside it. Carried over exactly: the
position table (our sinusoids interleave sin/cos, so the table itself is stored, not CTranslate2's
built-in one), the sqrt(d_model) embedding scale, post- or pre-norm (with the final LayerNorm of each
stack), mBART-50's LayerNorm of the embeddings, the activation, tied and shared embeddings (stored
once, as aliases), LayerNorm epsilon, and the special tokens: source = tokens + "</s>", the decoder
starts from "<s>" (NLLB-200, M2M-100, mBART-50: from "</s>", model.decoder_start=eos). Beside the model,
seq2seq.json (DECODING_FILE) records max_positions, the options under which CTranslate2 writes
seq2seq-translate's lines, the languages and where a multilingual model's tag goes ("data":
src_lang/tgt_lang, or directions and lang_tag), and the checkpoint it was made from.

Reading (the engine's side) imports no torch: only the writer does, when it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.artifacts.freshness import checkpoint_record
from seq2seq.artifacts.path_kind import CTRANSLATE2_FILE, DECODING_FILE
from seq2seq.artifacts.run_dir import CTRANSLATE2_DIR, RunDir
from seq2seq.config import ModelConfig, TranslateConfig, UserError
from seq2seq.data.directions import language_record
from seq2seq.data.tokenizer import BOS, EOS, PAD, UNK, Tokenizers


def layer_norm_eps() -> float:
    """Every LayerNorm of the model is built with torch's default epsilon."""
    import torch

    return torch.nn.LayerNorm(1).eps


# --- writing ----------------------------------------------------------------------------------------


def ctranslate2_writer(
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
    if model_cfg.encoder_drop_residual_layer is not None:  # its encoder layer always adds the residual
        raise UserError(
            f"{path}: model.encoder_drop_residual_layer={model_cfg.encoder_drop_residual_layer}: CTranslate2's "
            "Transformer has no encoder layer without its residual connection; translate with engine=torch"
        )
    state = payload["model"]
    from seq2seq.model.embedding import sinusoidal_table  # torch: only the writer needs it

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
        layernorm_embedding=model_cfg.embedding_norm,  # mBART-50's, after the embeddings and positions
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
    if model_cfg.embedding_norm:
        norm(encoder.layernorm_embedding, "src_embed_norm")
        norm(decoder.layernorm_embedding, "tgt_embed_norm")
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

    spec.config.layer_norm_epsilon = layer_norm_eps()
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    # As search.py starts every hypothesis: pad (Marian), <s>, or </s> (NLLB-200, M2M-100, mBART-50).
    spec.config.decoder_start_token = {"pad": PAD, "bos": BOS, "eos": EOS}[model_cfg.decoder_start]
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
        # The languages and tag convention (data.directions, data.lang_tag): the engine tags as PyTorch does.
        "data": language_record(payload["config"].get("data", {})),
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


# --- reading ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportFiles:
    """What the engine reads of a CTranslate2 model directory beside model.bin, read once."""

    tokenizers: Tokenizers
    max_positions: int
    languages: dict[str, Any] | None  # the data config keys (directions.LANGUAGE_KEYS); None before they were recorded


def read_export(directory: Path) -> ExportFiles:
    """The tokenizer(s), checked against CTranslate2's vocabulary files, and the seq2seq.json record that
    seq2seq-export writes beside model.bin (an export without one: the schema's max_positions)."""
    try:
        tokenizers = Tokenizers.load(directory)
    except FileNotFoundError as err:
        raise UserError(f"{directory}: no tokenizer.json in the CTranslate2 model directory") from err
    check_vocabularies(directory, tokenizers)
    decoding = directory / DECODING_FILE
    if not decoding.is_file():
        return ExportFiles(tokenizers, ModelConfig.max_positions, None)
    try:
        record = json.loads(decoding.read_text(encoding="utf-8"))
        value, languages = record["max_positions"], record.get("data")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{decoding}: not a readable seq2seq export record ({type(err).__name__}: {err})") from err
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise UserError(f"{decoding}: max_positions={value!r}: must be an integer of at least 2")
    return ExportFiles(tokenizers, value, languages if isinstance(languages, dict) else None)


def check_vocabularies(directory: Path, tokenizers: Tokenizers) -> None:
    """CTranslate2 maps tokens to ids by its vocabulary files, we map text to tokens by the tokenizer:
    the two must list the same tokens in the same order, or every id would mean another token."""
    for side, tokenizer in (("source", tokenizers.src), ("target", tokenizers.tgt)):
        path = directory / f"{side}_vocabulary.json"
        path = path if path.is_file() else directory / "shared_vocabulary.json"
        if not path.is_file():
            continue  # CTranslate2 itself says what is missing when it loads
        try:
            tokens = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as err:
            raise UserError(f"{path}: not a readable vocabulary ({err})") from err
        if tokens != [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]:
            raise UserError(
                f"{path}: its tokens are not the tokenizer's beside it, in the same order (the export was altered "
                "or mixed with another's)"
            )


def unreadable_model(directory: Path, error: Exception, version: str) -> UserError:
    """The error for a model.bin CTranslate2 cannot load, said as for a damaged safetensors file: the
    file looks damaged, and what decodes instead (the checkpoint it was made from, on PyTorch, or a new
    export of it). Only a binary version a little above CTranslate2's own (6 in 4.x) is taken for a
    newer CTranslate2's file: one overwritten at its start reads as "binary version v1651663207",
    which CTranslate2 calls "a later version"."""
    detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
    run = directory.parent if directory.name == CTRANSLATE2_DIR and RunDir(directory.parent).has_checkpoints() else None
    source = _recorded_checkpoint(directory / DECODING_FILE)
    if run is not None:
        decode, export = f"seq2seq-translate run={run} engine=torch", f"seq2seq-export run={run}"
    elif source is not None:
        decode, export = f"seq2seq-translate checkpoint={source}", f"seq2seq-export checkpoint={source}"
    else:
        decode, export = "the checkpoint it was exported from (engine=torch)", "seq2seq-export checkpoint=<its .pt>"
    instead = f"translate with {decode}, or export it again: {export} format=ctranslate2 output=<new dir>"
    model = directory / CTRANSLATE2_FILE
    binary_version = _binary_version(model)
    if "binary version" in detail and binary_version is not None and binary_version <= LATEST_PLAUSIBLE_VERSION:
        return UserError(
            f"{model}: written by a CTranslate2 later than this {version} (binary version {binary_version}): "
            f"pip install -U ctranslate2, or {instead}"
        )
    if binary_version is not None and binary_version > LATEST_PLAUSIBLE_VERSION:
        detail = f"it starts with binary version {binary_version}, which no CTranslate2 writes"
    return UserError(f"{model}: the file looks damaged (truncated or overwritten): {detail}; {instead}")


LATEST_PLAUSIBLE_VERSION = 100  # model.bin's binary version went from 1 to 6 in CTranslate2 1.0-4.x


def _binary_version(model: Path) -> int | None:
    """model.bin's first 4 bytes: the format's version, a little-endian uint32."""
    try:
        with open(model, "rb") as file:
            head = file.read(4)
    except OSError:
        return None
    return int.from_bytes(head, "little") if len(head) == 4 else None


def _recorded_checkpoint(decoding: Path) -> str | None:
    """The checkpoint an export records it was made from, where that file is still there."""
    try:
        source = json.loads(decoding.read_text(encoding="utf-8")).get("source_checkpoint")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return source if isinstance(source, str) and Path(source).is_file() else None
