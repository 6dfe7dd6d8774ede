"""Marian models (OPUS-MT, `MarianMTModel` in Hugging Face `transformers`) to and from this project.

Import (`seq2seq-train init_from=<Marian directory or Hub id>`): the Marian config becomes a
ModelConfig (post-norm, sines-then-cosines positions, Marian's activation and embedding scale, its
final_logits_bias as a fixed output bias, targets starting from pad), the weights are renamed (and
the separate Q/K/V projections fused), and the embedding rows are reordered into this project's id
layout (`seq2seq.data.sentencepiece`), whose SentencePiece tokenizers then read the model's
source.spm / target.spm / vocab.json.

Export (`seq2seq-export format=huggingface`): the reverse, written with `MarianMTModel.save_pretrained`
so that `AutoModelForSeq2SeqLM.from_pretrained` loads it without custom code. A model trained here
with interleaved sinusoids is exported exactly by permuting its residual-stream dimensions (every
weight that reads or writes the stream, and the LayerNorms, which do not care about order) so that
its position table becomes Marian's. Its byte-level BPE tokenizer goes as a `PreTrainedTokenizerFast`
over the same tokenizer.json (the same library tokenizes, so ids cannot drift), with "</s>" appended
to each source as this project does.

`transformers` is imported only here, and only when one of these is used (the `huggingface` extra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts.checkpoint import FORMAT, ModelPayload, Vocabulary
from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.config import ModelConfig, TranslateConfig, UserError
from seq2seq.data.directions import TARGET_TAGGED
from seq2seq.data.sentencepiece import SentencePieceTokenizers, has_sentencepiece_files
from seq2seq.data.tokenizer import BOS, BOS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK, Tokenizers, decoder_start_id
from seq2seq.model.embedding import sinusoidal_table

EXTRA = "pip install 'seq2seq[huggingface]'"
# Marian's activation_function names -> ours (transformers' "gelu" is the exact, erf one, as F.gelu).
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise UserError(f"Hugging Face models need the transformers and sentencepiece packages: {EXTRA}") from err
    return transformers


# --- what init_from names ---------------------------------------------------------------------------


def is_huggingface_model(value: str) -> bool:
    """init_from names a Hugging Face model: a directory whose config.json has a model_type
    (`seq2seq.artifacts.path_kind` tells; this project's weights export has a "format" instead), or something
    shaped like a Hub id that is not a path here."""
    path = Path(value)
    if path.is_dir():
        return path_kind(path) is PathKind.HUGGINGFACE
    return not path.exists() and bool(HUB_ID.match(value)) and path.suffix not in (".pt", ".safetensors")


# The files of a Hub model's directory that init_from= reads: config and tokenizer JSON, Marian's *.spm,
# NLLB-200's, M2M-100's and mBART-50's sentencepiece.bpe.model, the weights, the model card.
HUB_FILES = ("*.json", "*.spm", "*.model", "*.safetensors", "*.bin", "*.md")


def local_directory(value: str) -> Path:
    """The model's local directory: `value` itself, or the Hub's download of it."""
    path = Path(value)
    if path.is_dir():
        return path
    transformers_module()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(value, allow_patterns=list(HUB_FILES)))
    except Exception as err:  # offline, unknown repository, gated: the hub raises many kinds
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(
            f"init_from={value}: not a local directory, and it could not be downloaded from the Hugging Face Hub "
            f"(offline or unknown model: {detail}); download it where the Hub is reachable and give its directory"
        ) from err


# --- Marian config <-> ModelConfig ------------------------------------------------------------------


def bart_family_config(hf: Any, where: str, checks: list[tuple[bool, str]], **layout: Any) -> ModelConfig:
    """The ModelConfig of a config in BART's field names (MarianConfig, M2M100Config): what neither can
    differ in and `checks` of its own are one-line errors; `layout`, the fields where the families differ."""
    shared = [
        (hf.encoder_attention_heads == hf.decoder_attention_heads, "encoder and decoder attention heads differ"),
        (hf.encoder_ffn_dim == hf.decoder_ffn_dim, "encoder and decoder ffn_dim differ"),
        (hf.activation_function in ACTIVATIONS, f"activation_function={hf.activation_function!r} is not supported"),
    ]
    for ok, why in [*shared, *checks]:
        if not ok:
            raise UserError(f"{where}: {why}")
    return ModelConfig(
        d_model=hf.d_model,
        heads=hf.encoder_attention_heads,
        ffn_dim=hf.encoder_ffn_dim,
        encoder_layers=hf.encoder_layers,
        decoder_layers=hf.decoder_layers,
        dropout=float(hf.dropout),
        attention_dropout=float(hf.attention_dropout),
        activation_dropout=float(hf.activation_dropout),
        activation=ACTIVATIONS[hf.activation_function],
        positions="sinusoidal",
        max_positions=hf.max_position_embeddings,
        scale_embedding=bool(hf.scale_embedding),
        **layout,
    )


def bart_family_fields(cfg: ModelConfig) -> dict[str, Any]:
    """The fields of a config in BART's names that Marian's and M2M-100's take from ours as they are."""
    return {
        "d_model": cfg.d_model,
        "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers,
        "encoder_attention_heads": cfg.heads,
        "decoder_attention_heads": cfg.heads,
        "encoder_ffn_dim": cfg.ffn_dim,
        "decoder_ffn_dim": cfg.ffn_dim,
        "max_position_embeddings": cfg.max_positions,
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout,
    }


def model_config(hf: Any, where: str) -> ModelConfig:
    """The ModelConfig of a MarianConfig; what this project cannot build is a one-line error."""
    if hf.model_type != "marian":
        raise UserError(f"{where}: model_type={hf.model_type!r}; only Marian models (OPUS-MT) can be imported")
    return bart_family_config(
        hf,
        where,
        [(hf.decoder_start_token_id == hf.pad_token_id, "decoder_start_token_id is not the pad token")],
        norm_first=False,
        tie_output=bool(getattr(hf, "tie_word_embeddings", True)),
        share_embeddings=bool(hf.share_encoder_decoder_embeddings),
        sinusoid_layout="split",
        output_bias=True,
        decoder_start="pad",
    )


# Keys a run may set for a pretrained model: they change training, not the architecture.
TRAINING_ONLY_KEYS = ("dropout", "attention_dropout", "activation_dropout")


def pretrained_model_config(directory: Path, overrides: list[str], user: ModelConfig) -> ModelConfig:
    """The pretrained model's config, with the run's dropout overrides; an override of anything else
    (model.d_model=..., or a model= group) is a one-line error."""
    if not has_sentencepiece_files(directory) and (directory / "tokenizer.json").is_file():
        raise UserError(
            f"init_from={directory}: an export of a byte-level run (tokenizer.json, no source.spm): a Marian model "
            "needs SentencePiece; train with data.tokenizer=sentencepiece, or give init_from=<its run's checkpoint>"
        )
    hf = transformers_module().AutoConfig.from_pretrained(str(directory))
    return with_training_overrides(model_config(hf, str(directory)), directory, overrides, user)


def with_training_overrides(cfg: ModelConfig, directory: Path, overrides: list[str], user: ModelConfig) -> ModelConfig:
    """A pretrained model's config with the run's dropout overrides; any other model.* override is an error."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key == "model":
            raise UserError(f"'{override}': init_from={directory} brings its own architecture; drop model=")
        if key.startswith("model."):
            name = key.removeprefix("model.")
            if name in TRAINING_ONLY_KEYS:
                setattr(cfg, name, getattr(user, name))
            elif str(getattr(user, name, None)) != str(getattr(cfg, name, None)):
                raise UserError(
                    f"'{override}': cannot change for the pretrained model in {directory} "
                    f"(it has {name}={getattr(cfg, name, None)!r}); only {', '.join(TRAINING_ONLY_KEYS)} can"
                )
    return cfg


# --- weights -------------------------------------------------------------------------------------


def _layer_pairs(cfg: ModelConfig) -> list[tuple[str, str]]:
    """(our name, Marian's name) for the tensors that are the same in both, without the fused
    attention projections and the embeddings."""

    def both_stacks(ours: str, theirs: str, self_norm: str) -> list[tuple[str, str]]:
        """What encoder and decoder layers share: self-attention's output and norm, the FFN and its norm."""
        return [
            (f"{ours}.self_attn.out_proj", f"{theirs}.self_attn.out_proj"),
            (f"{ours}.{self_norm}.norm", f"{theirs}.self_attn_layer_norm"),
            (f"{ours}.ffn.linear1", f"{theirs}.fc1"),
            (f"{ours}.ffn.linear2", f"{theirs}.fc2"),
            (f"{ours}.ffn_residual.norm", f"{theirs}.final_layer_norm"),
        ]

    pairs = []
    for i in range(cfg.encoder_layers):
        pairs += both_stacks(f"encoder_layers.{i}", f"model.encoder.layers.{i}", "attn_residual")
    for i in range(cfg.decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        pairs += both_stacks(ours, theirs, "self_residual") + [
            (f"{ours}.cross_attn.q_proj", f"{theirs}.encoder_attn.q_proj"),
            (f"{ours}.cross_attn.out_proj", f"{theirs}.encoder_attn.out_proj"),
            (f"{ours}.cross_residual.norm", f"{theirs}.encoder_attn_layer_norm"),
        ]
    return [(f"{a}.{kind}", f"{b}.{kind}") for a, b in pairs for kind in ("weight", "bias")]


def _fused(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    """(our fused projection, Marian's projections it concatenates, in order), weight and bias."""
    fused = []
    for i in range(cfg.encoder_layers):
        fused.append((f"encoder_layers.{i}.self_attn.qkv_proj", f"model.encoder.layers.{i}.self_attn", "qkv"))
    for i in range(cfg.decoder_layers):
        fused.append((f"decoder_layers.{i}.self_attn.qkv_proj", f"model.decoder.layers.{i}.self_attn", "qkv"))
        fused.append((f"decoder_layers.{i}.cross_attn.kv_proj", f"model.decoder.layers.{i}.encoder_attn", "kv"))
    return [
        (f"{ours}.{kind}", [f"{theirs}.{p}_proj.{kind}" for p in parts])
        for ours, theirs, parts in fused
        for kind in ("weight", "bias")
    ]


def to_seq2seq(hf_state: dict[str, torch.Tensor], cfg: ModelConfig, src_order: list[int], tgt_order: list[int]) -> dict:
    """Marian's state dict -> ours; embedding rows and the output bias reordered to our ids
    (`order[our id] = Marian's id`)."""
    src, tgt = torch.tensor(src_order), torch.tensor(tgt_order)
    shared = hf_state["model.encoder.embed_tokens.weight"]  # model.shared.weight too, when shared
    state = {ours: hf_state[theirs] for ours, theirs in _layer_pairs(cfg)}
    for ours, parts in _fused(cfg):
        state[ours] = torch.cat([hf_state[p] for p in parts], dim=0)
    state["src_embed.weight"] = shared[src]
    decoder_embed = shared if cfg.share_embeddings else hf_state["model.decoder.embed_tokens.weight"]
    state["tgt_embed.weight"] = decoder_embed[tgt]
    state["output.weight"] = hf_state["lm_head.weight"][tgt]
    state["output_bias"] = hf_state["final_logits_bias"].reshape(-1)[tgt]
    if state["output_bias"][PAD_ID] <= PAD_LOGIT:  # our export's (`marian_start`): the model leaves pad out itself
        state["output_bias"][PAD_ID] = 0.0
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}


def to_marian(state: dict[str, torch.Tensor], cfg: ModelConfig, src_order: list[int], tgt_order: list[int]) -> dict:
    """Ours -> Marian's state dict (the inverse of `to_seq2seq`); position tables are not included."""
    src_back, tgt_back = torch.argsort(torch.tensor(src_order)), torch.argsort(torch.tensor(tgt_order))
    hf = {theirs: state[ours] for ours, theirs in _layer_pairs(cfg)}
    for ours, parts in _fused(cfg):
        for name, chunk in zip(parts, state[ours].chunk(len(parts), dim=0), strict=True):
            hf[name] = chunk
    hf["model.shared.weight"] = hf["model.encoder.embed_tokens.weight"] = state["src_embed.weight"][src_back]
    hf["model.decoder.embed_tokens.weight"] = state["tgt_embed.weight"][tgt_back]
    hf["lm_head.weight"] = state["output.weight"][tgt_back]
    bias = state.get("output_bias")
    vocab = state["output.weight"].size(0)
    hf["final_logits_bias"] = (bias[tgt_back] if bias is not None else torch.zeros(vocab)).reshape(1, -1)
    return {name: tensor.detach().float().contiguous() for name, tensor in hf.items()}


def split_layout(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The same function with the residual stream's dimensions reordered so that the interleaved
    sinusoid table becomes the split one: new dimension j is old dimension perm[j] (the sines, at even
    dimensions, first). Every tensor that reads the stream is permuted along its input, every tensor
    that writes it along its output, LayerNorms and embeddings along their only width."""
    d = cfg.d_model
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    out = {}
    for name, tensor in state.items():
        reads = (
            "_embed.weight",
            "output.weight",
            "qkv_proj.weight",
            "q_proj.weight",
            "kv_proj.weight",
            "linear1.weight",
        )
        if name.endswith(reads):
            tensor = tensor[:, perm]  # (rows, d_model): reads the stream (or is a row of it: embeddings)
        elif name.endswith(("out_proj.weight", "linear2.weight")):
            tensor = tensor[perm, :]  # writes the stream
        elif name.endswith(("norm.weight", "norm.bias", "out_proj.bias", "linear2.bias")):
            tensor = tensor[perm]
        out[name] = tensor
    return out


def read_pretrained(directory: Path, cfg: ModelConfig, tokenizers: SentencePieceTokenizers) -> ModelPayload:
    """A checkpoint-shaped payload of the Marian model in `directory`, for `model_from_checkpoint`
    and `seq2seq.train.init_from`."""
    transformers = transformers_module()
    try:
        hf_model = transformers.MarianMTModel.from_pretrained(str(directory))
    except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: weights that do not fit config.json
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{directory}: transformers could not load the model: {first}") from err
    hf_state = hf_model.state_dict()
    table = hf_state.get("model.encoder.embed_positions.weight")
    expected = sinusoidal_table(cfg.max_positions, cfg.d_model, "split")
    if table is not None and not torch.allclose(table.float(), expected, atol=1e-4):
        raise UserError(f"{directory}: its position table is not Marian's sinusoids; it cannot be imported")
    src_size, tgt_size = tokenizers.src.get_vocab_size(), tokenizers.tgt.get_vocab_size()
    if (src_size, tgt_size) != (hf_model.config.vocab_size, hf_model.config.decoder_vocab_size):
        raise UserError(
            f"{directory}: the vocabulary files have {src_size}/{tgt_size} entries, the model "
            f"{hf_model.config.vocab_size}/{hf_model.config.decoder_vocab_size}"
        )
    state = to_seq2seq(hf_state, cfg, tokenizers.src.order, tokenizers.tgt.order)
    return ModelPayload(
        format=FORMAT,
        model=state,
        config={"model": asdict(cfg)},
        vocab=Vocabulary(src_size=src_size, tgt_size=tgt_size, pad_id=PAD_ID),
        step=0,
    )


def load_pretrained(value: str) -> tuple[ModelPayload, SentencePieceTokenizers]:
    """(payload, tokenizers) of the Marian model `value` names (a directory or a Hub id)."""
    directory = local_directory(value)
    if not has_sentencepiece_files(directory):
        raise UserError(f"{directory}: no source.spm, target.spm and vocab.json (not a Marian model's directory)")
    tokenizers = SentencePieceTokenizers.load(directory)
    hf = transformers_module().AutoConfig.from_pretrained(str(directory))
    return read_pretrained(directory, model_config(hf, str(directory)), tokenizers), tokenizers


# --- export -------------------------------------------------------------------------------------


def huggingface_writer(
    payload: dict[str, Any], cfg: ModelConfig, tokenizers: Tokenizers | SentencePieceTokenizers, path: Path, card: str
) -> Callable[[Path], None]:
    """Checks and converts everything up front; the returned function writes the directory."""
    transformers = transformers_module()
    if cfg.norm_first:
        raise UserError(
            f"{path}: model.norm_first=true (pre-norm) has no MarianMTModel equivalent (Marian is post-norm); "
            "export format=safetensors or format=ctranslate2 instead"
        )
    if cfg.positions != "sinusoidal":
        raise UserError(f"{path}: model.positions={cfg.positions}: MarianMTModel has sinusoidal positions only")
    if cfg.encoder_drop_residual_layer is not None:
        raise UserError(
            f"{path}: model.encoder_drop_residual_layer={cfg.encoder_drop_residual_layer}: MarianMTModel's encoder "
            "layers all keep their residual connections; export format=safetensors instead"
        )
    if cfg.decoder_start == "pad" and not isinstance(tokenizers, SentencePieceTokenizers):
        raise UserError(f"{path}: model.decoder_start=pad needs a Marian model's SentencePiece tokenizers")
    data = payload.get("config", {}).get("data", {})
    if data.get("directions") and data.get("lang_tag") in TARGET_TAGGED:
        raise UserError(
            f"{path}: data.lang_tag={data.get('lang_tag')} has no Marian convention (MarianTokenizer reads the >>xx<< tag "
            "at the start of the source); export format=ctranslate2, or train with data.lang_tag=source_prefix"
        )
    state = dict(payload["model"])
    if cfg.sinusoid_layout == "interleaved":
        state = split_layout(state, cfg)
    if isinstance(tokenizers, SentencePieceTokenizers):
        src_order, tgt_order = tokenizers.src.order, tokenizers.tgt.order
        ids = {name: tokenizers.tgt.order[tokenizers.tgt.token_to_id(name)] for name in (PAD, EOS)}
        pad, eos = ids[PAD], ids[EOS]
        start = pad
        banned = [[pad]]
    else:
        if not tokenizers.joint:
            raise UserError(
                f"{path}: separate source and target tokenizers (data.joint_vocab=false) cannot be one Hugging Face "
                "tokenizer; train with data.joint_vocab=true to export format=huggingface"
            )
        src_order = list(range(tokenizers.src.get_vocab_size()))
        tgt_order = list(range(tokenizers.tgt.get_vocab_size()))
        pad, eos, start = PAD_ID, EOS_ID, decoder_start_id(cfg.decoder_start)
        banned = [[PAD_ID], [BOS_ID]]  # what seq2seq's search never emits
    hf_cfg = transformers.MarianConfig(
        vocab_size=len(src_order),
        decoder_vocab_size=len(tgt_order),
        **bart_family_fields(cfg),
        activation_function={"silu": "swish"}.get(cfg.activation, cfg.activation),
        scale_embedding=cfg.scale_embedding,
        share_encoder_decoder_embeddings=cfg.share_embeddings,
        tie_word_embeddings=cfg.tie_output,
        pad_token_id=pad,
        eos_token_id=eos,
        forced_eos_token_id=eos,
        decoder_start_token_id=start,
        bos_token_id=None,
    )
    model = transformers.MarianMTModel(hf_cfg)
    converted = to_marian(state, cfg, src_order, tgt_order)
    if cfg.decoder_start == "pad":
        marian_start(converted, pad)
    expected = model.state_dict()
    for name, tensor in expected.items():
        if "embed_positions" in name:
            continue  # Marian builds its sinusoids itself
        if name not in converted or tuple(converted[name].shape) != tuple(tensor.shape):
            raise UserError(f"{path}: cannot fill {name} of the Marian model from this checkpoint")
        with torch.no_grad():
            tensor.copy_(converted[name])
    model.generation_config.bad_words_ids = banned
    model.generation_config.decoder_start_token_id = start
    decoding_defaults(model.generation_config, cfg)
    hf_tokenizer = _hf_tokenizer(transformers, tokenizers, cfg)

    def write(directory: Path) -> None:
        model.save_pretrained(str(directory))
        hf_tokenizer.save_pretrained(str(directory))
        if isinstance(tokenizers, SentencePieceTokenizers):  # the run's own bytes (transformers reformats vocab.json):
            tokenizers.save(directory)  # the same fingerprint, so the export is known as the run's tokenizer
        (directory / "README.md").write_text(card, encoding="utf-8")

    return write


def marian_start(hf_state: dict[str, torch.Tensor], pad: int) -> None:
    """Our Marian-style decoder starts from a zero vector and leaves pad out of its softmax
    (seq2seq.model.transformer); MarianMTModel looks the start up as pad's embedding row, which
    its output layer shares: a zero row there, and a bias that gives pad no probability."""
    embeddings = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    for name in (*embeddings, "lm_head.weight"):  # tied to the embeddings: whichever is copied last wins
        hf_state[name] = hf_state[name].clone()
        hf_state[name][pad] = 0.0
    hf_state["final_logits_bias"] = hf_state["final_logits_bias"].clone()
    hf_state["final_logits_bias"][0, pad] = PAD_LOGIT


# Pad's bias in an export: exp() of it is 0 in fp32 and fp16 alike, and it is finite, so the label-smoothed
# loss of a run that starts from the export stays finite (reading it back sets it to 0: `to_seq2seq`).
PAD_LOGIT = -1e4


def decoding_defaults(generation: Any, cfg: ModelConfig) -> None:
    """seq2seq-translate's defaults, so that a plain `model.generate(**batch)` writes its lines: beam,
    length penalty, stopping once the beam has its finished hypotheses, and a length limit no line the
    command writes can reach (its budget, max_len_a * source + max_len_b, never exceeds
    model.max_positions; +1 for the start token generate counts). A line the command cuts at its
    budget runs on here, to </s> or that limit."""
    defaults = TranslateConfig()
    generation.num_beams = defaults.beam
    generation.length_penalty = defaults.length_penalty
    generation.early_stopping = True
    generation.max_length = cfg.max_positions + 1


def _hf_tokenizer(transformers: Any, tokenizers: Tokenizers | SentencePieceTokenizers, cfg: ModelConfig) -> Any:
    if isinstance(tokenizers, SentencePieceTokenizers):
        files = {"source_spm": tokenizers.src.spm_path, "target_spm": tokenizers.tgt.spm_path}
        extra = {} if tokenizers.joint else {"target_vocab_file": str(tokenizers.tgt.vocab_path)}
        return transformers.MarianTokenizer(
            str(files["source_spm"]),
            str(files["target_spm"]),
            str(tokenizers.src.vocab_path),
            separate_vocabs=not tokenizers.joint,
            model_max_length=cfg.max_positions,
            **extra,
        )
    from tokenizers import Tokenizer, processors

    # A copy with a post-processor that appends </s> to each source, as this project's batches do.
    tokenizer = Tokenizer.from_str(tokenizers.src.to_str())
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, EOS_ID)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        model_max_length=cfg.max_positions,
        clean_up_tokenization_spaces=False,
    )


def model_card(payload: dict[str, Any], run: str | None, sentencepiece: bool = False) -> str:
    """README.md of the export: what was trained on what, for how long, how well, and by which command.
    It names files, never a directory of the machine that trained it. No pipeline_tag: transformers 5
    has no translation or text2text-generation pipeline; `generate` is how the model is used."""
    config = payload.get("config", {})
    data = config.get("data", {})
    directions = list(data.get("directions") or [])
    languages = [data[k] for k in ("src_lang", "tgt_lang") if data.get(k) not in (None, "src", "tgt")]
    if directions:  # a multilingual model: every language of its directions
        languages = sorted({lang for d in directions for lang in d.split("-")})
    lines = ["---", "library_name: transformers", "tags: [translation, marian, seq2seq]"]
    if languages:
        lines.append(f"language: [{', '.join(languages)}]")
    lines += ["---", "", "# Translation model trained with seq2seq", ""]
    source = data.get("hub_name") or _file_name(data.get("dir") or data.get("train") or data.get("train_src"))
    lines.append(
        f"- data: {data.get('kind', '?')} ({data.get('src_lang', '?')} -> {data.get('tgt_lang', '?')}), "
        f"{source or 'built-in task'}"
    )
    if directions:
        # A byte-level tokenizer would read a space after the tag as part of the first word ("Ġword").
        spelling = "`>>de<< A sentence.`" if sentencepiece else "`>>de<<A sentence.` (no space after the tag)"
        lines.append(
            f"- directions: {', '.join(directions)} (multilingual: start each source with the target "
            f"language's tag, as OPUS-MT's models: {spelling})"
        )
    if config.get("init_from"):
        lines.append(f"- fine-tuned from: {_file_name(config['init_from'])}")
    tokenizer = data.get("tokenizer")
    if tokenizer:
        kind = f"SentencePiece {data.get('sentencepiece_type', '')}" if tokenizer == "sentencepiece" else tokenizer
        lines.append(f"- tokenizer: {kind.strip()}, {'joint' if data.get('joint_vocab', True) else 'per side'}")
    lines.append(f"- updates: {payload.get('step', '?')}")
    metrics = payload.get("metrics") or {}
    if metrics:
        lines.append("- validation (last): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(metrics.items())))
    best = payload.get("best")
    if best:
        lines.append(f"- best {config.get('best_metric', '?')}: {best['value']:.2f} at update {best['step']}")
    lines.append("- test scores: not measured by training (`seq2seq-translate run=<run> reference=<test refs>`)")
    overrides = Path(run) / ".hydra" / "overrides.yaml" if run else None
    if overrides is not None and overrides.is_file():
        import yaml

        args = yaml.safe_load(overrides.read_text(encoding="utf-8")) or []
        lines.append(f"- command: `seq2seq-train {' '.join(_without_directories(a) for a in args)}`")
    lines += [
        "",
        "generation_config.json holds seq2seq-translate's decoding defaults (beam, length penalty, a length",
        "limit no line of theirs reaches), so `generate` writes the lines the command writes:",
        "",
        "```python",
        "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
        "tokenizer = AutoTokenizer.from_pretrained(path)",
        "model = AutoModelForSeq2SeqLM.from_pretrained(path)",
        'batch = tokenizer(["a sentence"], return_tensors="pt", padding=True)',
        "print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))",
        "```",
        "",
    ]
    if sentencepiece:
        lines += _ctranslate2_section(config.get("model", {}).get("max_positions", ModelConfig.max_positions))
    return "\n".join(lines)


def _ctranslate2_section(max_positions: int) -> list[str]:
    """How CTranslate2, after its own converter, writes seq2seq-translate's lines (docs/huggingface.md)."""
    defaults = TranslateConfig()
    return [
        "CTranslate2: `ct2-transformers-converter --model <this directory> --output_dir <ct2 directory>`, then",
        "`translate_batch` with the source as `tokenizer.convert_ids_to_tokens(tokenizer(line).input_ids)` and",
        f"`beam_size={defaults.beam}, length_penalty={defaults.length_penalty}, min_decoding_length=0,",
        f"max_input_length={max_positions}` and, per line, `max_decoding_length` = min(int({defaults.max_len_a}",
        f"x (source pieces + 1) + {defaults.max_len_b}), {max_positions}) - 1: seq2seq-translate's lines.",
        "",
    ]


def _file_name(value: str | None) -> str | None:
    """A path as its last part (the machine's directories are nobody else's business); a Hub id as it is."""
    if not value or HUB_ID.match(value) and not Path(value).exists():
        return value
    return Path(value).name


def _without_directories(override: str) -> str:
    """key=/some/dir/file -> key=file: the command line as the card shows it."""
    key, sep, value = override.partition("=")
    return f"{key}{sep}{_file_name(value)}" if sep and "/" in value else override
