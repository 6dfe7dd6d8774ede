"""NLLB-200 (dense) and M2M-100 (`M2M100ForConditionalGeneration` in Hugging Face `transformers`) to and
from this project.

Import (`init_from=<directory>`, `checkpoint=<directory>`): the config becomes a ModelConfig as
transformers builds the model: pre-norm with a final LayerNorm on each stack, token embeddings
x sqrt(d_model) where scale_embedding says so, fairseq's sinusoids read from position 2
(model.sinusoid_layout=fairseq), one embedding shared by both stacks and the output, targets starting
from </s> (model.decoder_start=eos). The weights are renamed as Marian's are (the same names in both
models, `seq2seq.artifacts.marian`), the embedding rows reordered into this project's id layout
(`seq2seq.data.fairseq_vocab`), whose tokenizer reads the model's own sentencepiece.bpe.model and ids.

Export (`seq2seq-export format=huggingface` of a run fine-tuned from one): the reverse, written with
`M2M100ForConditionalGeneration.save_pretrained` (mBART-50's: `MBartForConditionalGeneration`) beside
the model's own tokenizer files, so that `AutoModelForSeq2SeqLM` and `AutoTokenizer` load it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from seq2seq.artifacts import vocab_rows
from seq2seq.artifacts.checkpoint import FORMAT, ModelPayload, Vocabulary
from seq2seq.artifacts.marian import (
    _fused,
    _layer_pairs,
    bart_family_config,
    bart_family_fields,
    decoding_defaults,
    transformers_module,
)
from seq2seq.config import ModelConfig, UserError
from seq2seq.data.directions import LANGUAGE_CODES
from seq2seq.data.fairseq_vocab import TOKENIZER_DIR, TOKENIZER_FILES, FairseqTokenizers
from seq2seq.data.tokenizer import PAD_ID
from seq2seq.model.embedding import FAIRSEQ_POSITION_OFFSET

log = logging.getLogger(__name__)
MODEL_TYPE = "m2m_100"


def model_config(hf: Any, where: str) -> ModelConfig:
    """The ModelConfig of an M2M100Config; what this project cannot build is a one-line error."""
    checks = [
        (hf.pad_token_id == FAIRSEQ_POSITION_OFFSET - 1, f"pad_token_id={hf.pad_token_id}: fairseq's is 1"),
        (hf.decoder_start_token_id == hf.eos_token_id, "decoder_start_token_id is not the </s> token"),
        (hf.d_model % 2 == 0, f"d_model={hf.d_model} is odd"),
        (getattr(hf, "tie_word_embeddings", True), "tie_word_embeddings=false (an output layer of its own)"),
    ]
    cfg = bart_family_config(
        hf,
        where,
        checks,
        norm_first=True,
        tie_output=True,
        share_embeddings=True,
        sinusoid_layout="fairseq",
        output_bias=False,
        decoder_start="eos",
    )
    if hf.encoder_layerdrop or hf.decoder_layerdrop:
        log.warning(
            "%s: encoder_layerdrop=%s, decoder_layerdrop=%s are not applied (every layer runs in training)",
            where,
            hf.encoder_layerdrop,
            hf.decoder_layerdrop,
        )
    return cfg


def _final_norms() -> list[tuple[str, str]]:
    return [
        (f"{ours}.{kind}", f"model.{theirs}.layer_norm.{kind}")
        for ours, theirs in (("encoder_norm", "encoder"), ("decoder_norm", "decoder"))
        for kind in ("weight", "bias")
    ]


def to_seq2seq(hf_state: dict[str, torch.Tensor], cfg: ModelConfig, order: list[int]) -> dict[str, torch.Tensor]:
    """M2M-100's state dict -> ours; embedding rows reordered to our ids (`order[our id] = its id`)."""
    pairs = _layer_pairs(cfg) + _final_norms()
    state = {ours: hf_state[theirs] for ours, theirs in pairs}
    for ours, parts in _fused(cfg):
        state[ours] = torch.cat([hf_state[p] for p in parts], dim=0)
    embedding = hf_state["model.shared.weight"][torch.tensor(order)]
    state["src_embed.weight"] = state["tgt_embed.weight"] = state["output.weight"] = embedding
    return {name: tensor.detach().clone().contiguous() for name, tensor in state.items()}


def to_m2m100(state: dict[str, torch.Tensor], cfg: ModelConfig, order: list[int]) -> dict[str, torch.Tensor]:
    """Ours -> M2M-100's state dict (the inverse of `to_seq2seq`), position tables left out."""
    hf = {theirs: state[ours] for ours, theirs in _layer_pairs(cfg) + _final_norms()}
    for ours, parts in _fused(cfg):
        for name, chunk in zip(parts, state[ours].chunk(len(parts), dim=0), strict=True):
            hf[name] = chunk
    embedding = state["src_embed.weight"][torch.argsort(torch.tensor(order))]
    for name in ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        hf[name] = embedding
    hf["lm_head.weight"] = embedding
    return {name: tensor.detach().float().contiguous() for name, tensor in hf.items()}


def read_pretrained(
    directory: Path,
    hf_config: Any,
    model_class: str = "M2M100ForConditionalGeneration",
    config_of: Callable[[Any, str], ModelConfig] = model_config,
    convert: Callable[[dict[str, torch.Tensor], ModelConfig, list[int]], dict[str, torch.Tensor]] = to_seq2seq,
) -> tuple[ModelPayload, FairseqTokenizers]:
    """A checkpoint-shaped payload of the model in `directory` and its tokenizer. mBART-50 reads the
    same way, with its own class, config and weight names (artifacts/mbart.py)."""
    transformers = transformers_module()
    cfg = config_of(hf_config, str(directory))
    tokenizers = FairseqTokenizers.of_huggingface(directory)
    size = tokenizers.src.get_vocab_size()
    if size != hf_config.vocab_size:
        raise UserError(f"{directory}: its tokenizer has {size} tokens, more than the model's {hf_config.vocab_size}")
    try:
        hf_model = getattr(transformers, model_class).from_pretrained(str(directory))
    except (OSError, ValueError, RuntimeError) as err:  # RuntimeError: weights that do not fit config.json
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{directory}: transformers could not load the model: {first}") from err
    state = convert(hf_model.state_dict(), cfg, tokenizers.src.order)
    payload = ModelPayload(
        format=FORMAT,
        model=state,
        config={"model": asdict(cfg), "data": {"lang_tag": LANGUAGE_CODES, "directions": None}},
        vocab=Vocabulary(src_size=size, tgt_size=size, pad_id=PAD_ID),
        step=0,
    )
    return payload, tokenizers


# --- export -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HuggingFaceFamily:
    """What the export writes for one family: transformers' config and model classes, the conversion of
    our state dict to theirs, whether its position table is a learned weight (else built from the config);
    and how its model is read (`config_of`, `to_ours`: as `read_pretrained` takes them), for the rows a
    pruned vocabulary dropped."""

    config_class: str
    model_class: str
    convert: Callable[[dict[str, torch.Tensor], ModelConfig, list[int]], dict[str, torch.Tensor]]
    learned_positions: bool
    tag: str  # the model card's tag: transformers' model_type
    config_of: Callable[[Any, str], ModelConfig] = model_config
    to_ours: Callable[[dict[str, torch.Tensor], ModelConfig, list[int]], dict[str, torch.Tensor]] = to_seq2seq


M2M100 = HuggingFaceFamily("M2M100Config", "M2M100ForConditionalGeneration", to_m2m100, False, MODEL_TYPE)


def huggingface_writer(
    payload: dict[str, Any],
    cfg: ModelConfig,
    tokenizers: FairseqTokenizers,
    path: Path,
    card: str,
    family: HuggingFaceFamily = M2M100,
) -> Callable[[Path], None]:
    """Checks and converts everything up front; the returned function writes the directory. mBART-50
    writes through here too, as `family` (seq2seq.artifacts.mbart.MBART)."""
    transformers = transformers_module()
    pruned = tokenizers if tokenizers.src.pruned is not None else None
    if pruned is not None:  # data.prune_vocab: the model's whole vocabulary again, as transformers knows it
        payload, tokenizers = vocab_rows.all_rows(payload, pruned, path, lambda source: _read_family(source, family))
    # mBART-50: learned positions and layernorm_embedding; M2M-100 / NLLB-200: sinusoids and neither.
    if (cfg.positions == "learned", cfg.embedding_norm) != (family.learned_positions, family.learned_positions):
        raise UserError(f"{path}: the checkpoint's model is not an {family.model_class}; export format=safetensors")
    source = tokenizers.src.huggingface_files
    if source is None:
        raise UserError(
            f"{path}: the run keeps no Hugging Face tokenizer files of its model ({TOKENIZER_DIR}/); "
            "export format=safetensors instead"
        )
    vocab = tokenizers.src.vocab["tokens"]
    ids = {token: i for i, token in enumerate(vocab) if token is not None}
    hf_cfg = getattr(transformers, family.config_class)(
        vocab_size=len(vocab),
        **bart_family_fields(cfg),
        activation_function=cfg.activation,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=cfg.scale_embedding,
        pad_token_id=ids["<pad>"],
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        decoder_start_token_id=ids["</s>"],
        tokenizer_class=transformers.AutoTokenizer.from_pretrained(str(source)).__class__.__name__,
    )
    model = getattr(transformers, family.model_class)(hf_cfg)
    converted = family.convert(dict(payload["model"]), cfg, tokenizers.src.order)
    expected = model.state_dict()
    for name, tensor in expected.items():
        if "embed_positions" in name and not family.learned_positions:
            continue  # built from the config
        if name not in converted or tuple(converted[name].shape) != tuple(tensor.shape):
            raise UserError(f"{path}: cannot fill {name} of the {family.model_class} from this checkpoint")
        with torch.no_grad():
            tensor.copy_(converted[name])
    model.generation_config.decoder_start_token_id = ids["</s>"]
    model.generation_config.bad_words_ids = [[ids["<pad>"]], [ids["<s>"]]]  # what seq2seq's search never emits
    decoding_defaults(model.generation_config, cfg)
    if pruned is not None:
        vocab_rows.suppress_dropped(model.generation_config, pruned)

    def write(directory: Path) -> None:
        model.save_pretrained(str(directory))
        for name in TOKENIZER_FILES:
            if (source / name).is_file():
                shutil.copyfile(source / name, directory / name)
        (directory / "README.md").write_text(card, encoding="utf-8")

    return write


def _read_family(directory: Path, family: HuggingFaceFamily) -> ModelPayload:
    """The payload of the `family` model in `directory` (the one a pruned run was pruned from)."""
    hf_config = transformers_module().AutoConfig.from_pretrained(str(directory))
    return read_pretrained(directory, hf_config, family.model_class, family.config_of, family.to_ours)[0]


def model_card(
    payload: dict[str, Any], tag: str = MODEL_TYPE, codes: tuple[str, str] = ("eng_Latn", "deu_Latn")
) -> str:
    """README.md of the export: what it was fine-tuned from and on, and how transformers translates with
    it (`codes`: the family's names of English and German, for the example)."""
    config = payload.get("config", {})
    data = config.get("data", {})
    directions = ", ".join(data.get("directions") or []) or "?"
    source = config.get("init_from")
    return "\n".join(
        [
            "---",
            "library_name: transformers",
            f"tags: [translation, {tag}, seq2seq]",
            "---",
            "",
            "# Translation model fine-tuned with seq2seq",
            "",
            f"- fine-tuned from: {Path(source).name if source else '?'}",
            f"- directions: {directions} (the model's language codes, or their ISO 639-1 codes)",
            f"- updates: {payload.get('step', '?')}",
            "",
            "As its base model: the source language is the tokenizer's src_lang, the target forced first:",
            "",
            "```python",
            "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer",
            f'tokenizer = AutoTokenizer.from_pretrained(path, src_lang="{codes[0]}")',
            "model = AutoModelForSeq2SeqLM.from_pretrained(path)",
            'batch = tokenizer(["a sentence"], return_tensors="pt", padding=True)',
            f'out = model.generate(**batch, forced_bos_token_id=tokenizer.convert_tokens_to_ids("{codes[1]}"))',
            "print(tokenizer.batch_decode(out, skip_special_tokens=True))",
            "```",
            "",
        ]
    )
