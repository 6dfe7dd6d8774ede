"""NLLB-200 and M2M-100 (`M2M100ForConditionalGeneration`) in and out, without the internet: tiny random
models built with transformers' own M2M100Config, their tokenizers (NllbTokenizer, M2M100Tokenizer)
over a SentencePiece model trained here. Imported, they compute transformers' logits and translate as
its `generate` does; fine-tuned, they export back to a directory transformers loads."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, compose_config

from seq2seq.artifacts.checkpoint import model_from_checkpoint
from seq2seq.artifacts.huggingface import load_pretrained
from seq2seq.config import UserError
from seq2seq.inference.translator import Translator

transformers = pytest.importorskip("transformers", reason="needs `pip install seq2seq[huggingface]`")
sentencepiece = pytest.importorskip("sentencepiece", reason="needs `pip install seq2seq[huggingface]`")

TOLERANCE = 1e-5
WORDS = {
    "en": "the a man woman dog cat sits runs on in red blue small big street park house with two young".split(),
    "de": "der die ein eine Mann Frau Hund Katze sitzt läuft auf im rot blau klein groß Straße Park Haus".split(),
}


def sentences(lang: str, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS[lang]) for _ in range(rng.randint(2, 9))) + "." for _ in range(count)]


def train_spm(directory: Path, kind: str = "bpe") -> Path:
    """sentencepiece.bpe.model, trained on both languages: a BPE model as NLLB's and M2M-100's are, or
    a unigram one as mBART-50's (XLM-R's) is, whatever its name says."""
    lines = sentences("en", 200, 0) + sentences("de", 200, 1)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(directory / "sentencepiece.bpe"),
        vocab_size=120,
        model_type=kind,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return directory / "sentencepiece.bpe.model"


def hf_directory(directory: Path, family: str, seed: int = 0) -> Path:
    """A random tiny M2M100ForConditionalGeneration with its family's tokenizer, saved as the Hub has them."""
    directory.mkdir(parents=True)
    spm_file = train_spm(directory, "unigram" if family == "mbart50" else "bpe")
    if family == "nllb":
        from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

        tokenizer = transformers.NllbTokenizer.from_pretrained(
            str(directory), additional_special_tokens=FAIRSEQ_LANGUAGE_CODES
        )
        extra_rows = 2  # as NLLB-200's 256,206 rows hold 256,204 tokens
    elif family == "mbart50":
        from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES

        tokenizer = transformers.MBart50Tokenizer.from_pretrained(
            str(directory), additional_special_tokens=FAIRSEQ_LANGUAGE_CODES
        )
        extra_rows = 0
    else:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
        pieces = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: i + 4 for i, p in enumerate(pieces)}}
        (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        tokenizer = transformers.M2M100Tokenizer(str(directory / "vocab.json"), str(spm_file))
        extra_rows = len(tokenizer.lang_token_to_id) + 8  # its language codes (not in len()), its made-up words
    tokenizer.save_pretrained(str(directory))
    torch.manual_seed(seed)
    mbart = family == "mbart50"
    classes = (
        ("MBartConfig", "MBartForConditionalGeneration")
        if mbart
        else ("M2M100Config", "M2M100ForConditionalGeneration")
    )
    config = getattr(transformers, classes[0])(
        vocab_size=len(tokenizer) + extra_rows,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="gelu" if mbart else "relu",
        scale_embedding=True,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        init_std=0.2,  # larger than a trained model's weights: logits that differ from token to token
        tokenizer_class=type(tokenizer).__name__,
    )
    model = getattr(transformers, classes[1])(config)
    with torch.no_grad():  # lines that end: the decoder's last LayerNorm leans towards </s>'s embedding
        eos = model.model.shared.weight[2]
        model.model.decoder.layer_norm.bias.copy_(2.5 * eos / eos.norm())
        if mbart:  # zeros and ones in a new model: make them count
            model.final_logits_bias.normal_(std=0.5)
            for stack in (model.model.encoder, model.model.decoder):
                stack.layernorm_embedding.weight.normal_(1.0, 0.2)
                stack.layernorm_embedding.bias.normal_(0.0, 0.2)
    model.save_pretrained(str(directory))
    return directory


CODES = {"nllb": ("eng_Latn", "deu_Latn"), "m2m100": ("en", "de"), "mbart50": ("en_XX", "de_DE")}


@pytest.fixture(scope="module", params=["nllb", "m2m100", "mbart50"])
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, hf_directory(tmp_path_factory.mktemp(request.param) / "model", request.param)


def hf_tokenizer(directory: Path, src: str, tgt: str):
    return transformers.AutoTokenizer.from_pretrained(str(directory), src_lang=src, tgt_lang=tgt)


def test_imported_model_computes_transformers_logits(family: tuple[str, Path]) -> None:
    name, directory = family
    src_lang, tgt_lang = CODES[name]
    payload, tokenizers = load_pretrained(str(directory))
    model = model_from_checkpoint(payload).eval()
    lines, targets = sentences("en", 6, 7), sentences("de", 6, 8)
    reference = hf_tokenizer(directory, src_lang, tgt_lang)
    batch = reference(lines, text_target=targets, return_tensors="pt", padding=True)
    back = torch.tensor(tokenizers.src.order)  # our id -> theirs
    to_ours = torch.argsort(back)
    # The layout each family was trained with: source `code ... </s>`, decoder `</s> code ...`.
    src_code, tgt_code = (reference.convert_tokens_to_ids(code_token(name, c)) for c in (src_lang, tgt_lang))
    assert (batch.input_ids[:, 0] == src_code).all() and (batch.labels[:, 0] == tgt_code).all()
    ours_src = [tokenizers.encode_src([line])[0] for line in lines]
    assert [[src_code, *back[ids].tolist(), 2] for ids in ours_src] == [
        [i for i in row if i != 1] for row in batch.input_ids.tolist()
    ]  # our SentencePiece ids are transformers' (in our numbering)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    decoder_input = torch.cat([torch.full((len(lines), 1), 2), batch.labels[:, :-1]], dim=1)
    decoder_input[decoder_input == -100] = 1
    with torch.no_grad():
        theirs = hf_model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=decoder_input
        )
        ours = model(to_ours[batch.input_ids], to_ours[decoder_input])
    real = batch.labels != 1
    theirs_logits = theirs.logits[:, :, back]  # their vocabulary columns in our order
    diff = (ours[real] - theirs_logits[real]).abs().max().item()
    assert diff < TOLERANCE, f"max abs logit difference {diff:.2e} (tolerance {TOLERANCE:.0e})"
    assert ours[real].abs().max() > 1.0  # logits that mean something


def code_token(family: str, code: str) -> str:
    return f"__{code}__" if family == "m2m100" else code


def test_an_unknown_architecture_is_one_line(family: tuple[str, Path], tmp_path: Path) -> None:
    _, directory = family
    for model_type, expected in (("t5", "model_type='t5'"), ("bart", "model_type='bart'"), ("nllb-moe", "NLLB-MoE")):
        other = tmp_path / model_type
        other.mkdir()
        config = getattr(
            transformers, {"t5": "T5Config", "bart": "BartConfig", "nllb-moe": "NllbMoeConfig"}[model_type]
        )()
        config.save_pretrained(str(other))
        with pytest.raises(UserError, match=expected) as info:
            load_pretrained(str(other))
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("family", ["mbart50"], indirect=True)
def test_mbart_cc25_is_one_line(family: tuple[str, Path], tmp_path: Path) -> None:
    """An MBartForConditionalGeneration with MBartTokenizer (mBART-cc25, the denoising model, not
    mBART-50's many-to-many layout) is refused in one line naming its tokenizer (docs/huggingface.md)."""
    _, directory = family
    other = tmp_path / "cc25"
    shutil.copytree(directory, other)
    tokenizer_config = json.loads((other / "tokenizer_config.json").read_text(encoding="utf-8"))
    (other / "tokenizer_config.json").write_text(
        json.dumps({**tokenizer_config, "tokenizer_class": "MBartTokenizer"}), encoding="utf-8"
    )
    with pytest.raises(UserError, match=r"tokenizer MBartTokenizer\w*; this tool reads NllbTokenizer") as info:
        load_pretrained(str(other))
    assert "\n" not in str(info.value)


def test_a_hub_id_downloads_the_models_own_tokenizer_too(
    family: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """init_from=<a Hub id> (where the Hub is reachable): the download keeps every file the family's
    directory needs, its sentencepiece.bpe.model among them (it was left out: "no sentencepiece.bpe.model").
    No Hub here: a stand-in for snapshot_download serves the tiny model's directory, each file only
    where allow_patterns matches its name, as the Hub's does."""
    import fnmatch

    import huggingface_hub

    name, directory = family

    def snapshot_download(repo_id: str, allow_patterns: list[str] | None = None, **_: object) -> str:
        target = tmp_path / "hub" / repo_id.replace("/", "--")
        target.mkdir(parents=True)
        for file in directory.iterdir():
            if allow_patterns is None or any(fnmatch.fnmatch(file.name, pattern) for pattern in allow_patterns):
                shutil.copyfile(file, target / file.name)
        return str(target)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    downloaded, tokenizers = load_pretrained(f"facebook/tiny-{name}")
    local, local_tokenizers = load_pretrained(str(directory))
    assert tokenizers.src.order == local_tokenizers.src.order
    assert downloaded["model"].keys() == local["model"].keys()
    assert all(torch.equal(downloaded["model"][k], local["model"][k]) for k in local["model"])


def test_a_directory_without_its_tokenizer_is_one_line(family: tuple[str, Path], tmp_path: Path) -> None:
    _, directory = family
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copyfile(directory / name, bare / name)
    with pytest.raises(UserError, match=r"no sentencepiece\.bpe\.model") as info:
        load_pretrained(str(bare))
    assert "\n" not in str(info.value)


OUTPUT_TOKENS = 12  # each line's budget, </s> included: one for all, so that one generate call has it too


def generated(directory: Path, family: str, lines: list[str], beam: int, **options: object) -> list[list[int]]:
    """transformers' generate on the lines as one padded batch, the target language's code forced
    first (forced_bos_token_id), pad and <s> banned as seq2seq's search bans them: each line's ids
    after the decoder's start, without </s> and padding (the code first). `options`: generate's
    arguments instead of these (`as_ctranslate2`)."""
    src_lang, tgt_lang = CODES[family]
    tokenizer = hf_tokenizer(directory, src_lang, tgt_lang)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    batch = tokenizer(lines, return_tensors="pt", padding=True)
    settings = dict(
        num_beams=beam,
        max_new_tokens=OUTPUT_TOKENS + 1,  # seq2seq's budget (tokens and </s>) and the code, which it leaves out
        early_stopping=True,  # done at `beam` finished hypotheses, seq2seq's rule
        length_penalty=1.0,
        forced_bos_token_id=tokenizer.convert_tokens_to_ids(code_token(family, tgt_lang)),
        bad_words_ids=[[model.config.pad_token_id], [model.config.bos_token_id]],
        forced_eos_token_id=model.config.eos_token_id,  # a line cut at the budget ends with </s>, as seq2seq's
    )
    with torch.no_grad():
        out = model.generate(**batch, **{**settings, **options})
    ends = (model.config.eos_token_id, model.config.pad_token_id)
    return [[i for i in row[1:] if i not in ends] for row in out.tolist()]


class Renormalised(transformers.LogitsProcessor):
    """The banned ids (<pad>, <s>; a pruned run's dropped ids) out of the softmax, as CTranslate2's
    suppress_sequences takes them out before its softmax: generate's processors ban them after its
    log_softmax, which leaves each beam's remaining log-probabilities as they were."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores.log_softmax(dim=-1)


class BestOnlyEndsAfterTheCode(transformers.LogitsProcessor):
    """CTranslate2's rule at the first step after a forced target prefix (src/decoding.cc,
    update_sample_with_prefix; its issue #277): a </s> ranked below the best candidate is replaced by a
    dead candidate that keeps its place among the top `beam`, so the beam goes on with the beam - 1
    best other tokens and one dead beam, where generate would finish the empty line and go on with the
    `beam` best others. Here, at the step after [</s>, code] (only the first beam is alive: the others
    are copies at -1e9, as CTranslate2's at -1e10): where </s> ranks 1 to beam - 1, it and every token
    below the top `beam` are banned, so that generate's `beam` live beams are those beam - 1 and one of
    its dead copies. `fired`: the rows it changed (`beam` rows a line)."""

    def __init__(self, eos: int, beam: int) -> None:
        self.eos, self.beam, self.fired = eos, beam, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[1] != 2 or self.beam == 1:
            return scores
        ranked = scores.argsort(dim=-1, descending=True, stable=True)
        eos_rank = (ranked == self.eos).to(torch.int8).argmax(dim=-1)
        rows = (eos_rank > 0) & (eos_rank < self.beam)
        self.fired += int(rows.sum())
        banned = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, ranked[:, self.beam :], True)
        banned[:, self.eos] = True
        return scores.masked_fill(banned & rows[:, None], float("-inf"))


def as_ctranslate2(beam: int, eos: int = 2) -> dict:
    """generate's options for the search of ctranslate2.Translator with max_decoding_length=OUTPUT_TOKENS
    (the forced code counted), suppress_sequences=[<pad>, <s>], min_decoding_length=0, the code as
    target_prefix, length_penalty=1 (docs/huggingface.md): CTranslate2's three rules of its own.
    - The bans renormalised (`Renormalised`): generate's own renormalize_logits (a pruned run's export
      sets it) would run after the next processor, so it is off.
    - Only the best candidate may end the line right after the code (`BestOnlyEndsAfterTheCode`).
    - At the last step every one of the top `beam` candidates ends, cut or not, and a cut line's length
      has no </s>: generate's max length there (max_new_tokens=OUTPUT_TOKENS) with no forced </s>.
    The processors run after generate's bans and forcing."""
    return dict(
        logits_processor=[Renormalised(), BestOnlyEndsAfterTheCode(eos, beam)],
        renormalize_logits=False,
        max_new_tokens=OUTPUT_TOKENS,
        forced_eos_token_id=None,
    )


def search_as_ctranslate2(monkeypatch: pytest.MonkeyPatch) -> None:
    """seq2seq's beam search, for the rest of the test, under CTranslate2's rules: the bans renormalised,
    only the best candidate ending the line after the code, the top `beam` candidates ending at the
    budget's last token; its lengths stay generate's (search.SearchRules.CTRANSLATE2_WITH_GENERATE_LENGTHS)."""
    import inspect

    from seq2seq.inference import search, translator

    def beam_search(*args: object, **kwargs: object) -> list:
        bound = inspect.signature(search.beam_search).bind(*args, **kwargs)
        assert bound.arguments["rules"] is search.SearchRules.GENERATE  # the translator's choice for this layout
        bound.arguments.update(rules=search.SearchRules.CTRANSLATE2_WITH_GENERATE_LENGTHS, renormalise=True)
        return search.beam_search(*bound.args, **bound.kwargs)

    monkeypatch.setattr(translator, "beam_search", beam_search)


@pytest.mark.parametrize("count", [16, pytest.param(100, marks=pytest.mark.slow)])
@pytest.mark.parametrize("beam", [1, 5])
def test_translates_as_transformers_generate(family: tuple[str, Path], beam: int, count: int) -> None:
    """The model as it came, through the Python API's `load` (engine=auto), with the family's own layout:
    source `code ... </s>`, decoder `</s> code ...`; the ISO 639-1 codes a LibreTranslate client sends
    name NLLB's languages (en, de -> eng_Latn, deu_Latn)."""
    from seq2seq.inference.loading import load

    name, directory = family
    lines = sentences("en", count, 3)
    engine = load(
        directory, beam=beam, precision="fp32", device="cpu", src_lang="en", tgt_lang="de", max_len_a=0,
        max_len_b=OUTPUT_TOKENS,
    )  # fmt: skip
    assert engine.kind == "torch"
    ours = [nbest[0] for nbest in engine.translate_nbest(lines)]
    to_ours = torch.argsort(torch.tensor(engine.tokenizers.tgt.order)).tolist()
    theirs = [[to_ours[i] for i in ids] for ids in generated(directory, name, lines, beam)]
    assert [h.tokens for h in ours] == theirs
    assert [h.text for h in ours] == [engine.tokenizers.decode_tgt([ids])[0] for ids in theirs]
    # A random model repeats itself; still, not one line for all, and not only empty ones.
    assert len({tuple(h.tokens) for h in ours}) >= 3 and max(len(h.tokens) for h in ours) > 2


def parallel_corpus(directory: Path) -> list[str]:
    """English-German pairs on disk (data.kind=parallel_files), the training and validation splits."""
    directory.mkdir()
    for split, count, seed in (("train", 64, 11), ("valid", 8, 12)):
        (directory / f"{split}.en").write_text("\n".join(sentences("en", count, seed)) + "\n", encoding="utf-8")
        (directory / f"{split}.de").write_text("\n".join(sentences("de", count, seed + 100)) + "\n", encoding="utf-8")
    return [
        "data.kind=parallel_files",
        *(
            f"data.{split}_{side}={directory / f'{split}.{lang}'}"
            for split in ("train", "valid")
            for side, lang in (("src", "en"), ("tgt", "de"))
        ),
        "data.src_lang=en",
        "data.tgt_lang=de",
        "data.cache_dir=" + str(directory / "cache"),
    ]


FINE_TUNE = [
    *[o for o in TINY_TRAIN if not o.startswith("data.task")],
    "max_steps=3", "valid_every=3", "save_every=3", "optim.lr=1e-3", "optim.warmup=2", "batch_tokens=256",
    "data.max_tokens=40",
]  # fmt: skip


def test_init_from_fine_tunes_and_exports_to_its_family(family: tuple[str, Path], tmp_path: Path) -> None:
    """init_from=<the directory> trains on, in the family's layout (the languages' codes put in); the run
    exports back to its family's class (M2M100ForConditionalGeneration, MBartForConditionalGeneration)
    with the model's own tokenizer files, which transformers loads and whose `generate` writes the run's
    lines."""
    from seq2seq.cli.export import export_plan
    from seq2seq.cli.train import train
    from seq2seq.config import ExportConfig
    from seq2seq.export.command import export

    name, directory = family
    overrides = [*FINE_TUNE, *parallel_corpus(tmp_path / "corpus"), f"init_from={directory}"]
    run_dir = tmp_path / "run"
    summary = train(compose_config("train", overrides), run_dir, overrides=overrides)
    assert summary["step"] == 3
    assert {"bleu", "chrf"} <= set(summary["metrics"])  # validated as any run (valid_every=3)
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))  # TensorBoard, as any run
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["config"]
    assert saved["model"]["decoder_start"] == "eos" and saved["data"]["lang_tag"] == "language_codes"
    assert list(saved["data"]["directions"]) == ["en-de"]
    assert (run_dir / "ctranslate2" / "model.bin").is_file()  # tests/test_m2m100_export.py decodes it
    output, _ = export(export_plan(ExportConfig(run=str(run_dir), output=str(tmp_path / "hf"), format="huggingface")))
    architecture = "MBartForConditionalGeneration" if name == "mbart50" else "M2M100ForConditionalGeneration"
    assert json.loads((output / "config.json").read_text())["architectures"] == [architecture]
    lines = sentences("en", 16, 5)
    for beam in (1, 5):
        translator = Translator.load(
            run_dir, beam=beam, precision="fp32", device="cpu", src_lang="en", tgt_lang="de", max_len_a=0,
            max_len_b=OUTPUT_TOKENS,
        )  # fmt: skip
        ours = [nbest[0].tokens for nbest in translator.translate_nbest(lines)]
        to_ours = torch.argsort(torch.tensor(translator.tokenizers.tgt.order)).tolist()
        assert ours == [[to_ours[i] for i in ids] for ids in generated(output, name, lines, beam)]


def test_trainable_top_layers_leaves_the_rest_of_the_pretrained_model_as_it_came(
    family: tuple[str, Path], tmp_path: Path
) -> None:
    """trainable_top_layers=1 on the family's model: the shared embedding (the tied output layer), mBART's
    positions, embedding norms and final_logits_bias, and the bottom layer of each stack end 3 updates
    as the directory has them; the top layers and the final LayerNorms train."""
    from seq2seq.artifacts.checkpoint import load_checkpoint
    from seq2seq.cli.train import train

    _, directory = family
    overrides = [*FINE_TUNE, *parallel_corpus(tmp_path / "corpus"), f"init_from={directory}", "trainable_top_layers=1"]
    train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    before = load_pretrained(str(directory))[0]["model"]
    after = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["model"]
    kept = [k for k in before if k.startswith(("src_", "tgt_", "output", "encoder_layers.0.", "decoder_layers.0."))]
    trained = [
        k for k in before if k.startswith(("encoder_layers.1.", "decoder_layers.1.", "encoder_norm", "decoder_norm"))
    ]
    assert {"src_embed.weight", "output.weight"} <= set(kept) and set(kept) | set(trained) == set(before)
    assert [k for k in kept if not torch.equal(before[k], after[k])] == []
    assert all(not torch.equal(before[k], after[k]) for k in trained if k.endswith(".weight"))


def test_a_language_the_model_lacks_is_one_line(family: tuple[str, Path]) -> None:
    from seq2seq.inference.loading import load

    name, directory = family
    with pytest.raises(UserError, match=r"^tgt_lang=tlh: not one of the model's \d+ languages") as info:
        load(directory, device="cpu", src_lang="en", tgt_lang="tlh")
    assert "\n" not in str(info.value)
    with pytest.raises(
        UserError, match=r"^src_lang: the model \(NLLB-200/M2M-100/mBART-50 layout\) starts each source"
    ):
        load(directory, device="cpu", tgt_lang="de").translate(["a man."])


@pytest.mark.parametrize(
    "override", ["data.lang_tag=source_prefix", "data.joint_vocab=false", "data.tokenizer=sentencepiece"]
)
def test_a_marian_only_option_is_one_line(family: tuple[str, Path], tmp_path: Path, override: str) -> None:
    from seq2seq.cli.train import train

    name, directory = family
    overrides = [*FINE_TUNE, *parallel_corpus(tmp_path / "corpus"), f"init_from={directory}", override]
    with pytest.raises(UserError, match=rf"^'{override}': init_from=.* is an {FAMILY_NAMES[name]} model") as info:
        train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    assert "\n" not in str(info.value) and not (tmp_path / "run").exists()


FAMILY_NAMES = {"nllb": "NLLB-200", "m2m100": "M2M-100", "mbart50": "mBART-50"}  # as the messages name them


def test_every_language_of_the_model_is_accepted_in_data_directions(family: tuple[str, Path]) -> None:
    """data.directions' check of its codes against ISO 639 passes each of the model's own languages:
    NLLB-200's ajp_Arab (ajp: retired from ISO 639-3 in 2023) and M2M-100's ns (Northern Sotho, not ISO
    639-1) were refused as no language codes."""
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M100_CODES

    from seq2seq.config import parse_direction

    name, directory = family
    _, tokenizers = load_pretrained(str(directory))
    languages = sorted(tokenizers.tgt.languages)
    own = {"nllb": "ajp_Arab", "m2m100": "ns", "mbart50": "en_XX"}[name]
    assert own in languages and (name != "m2m100" or set(languages) == set(M2M100_CODES["m2m100"]))
    for lang in languages:
        other = languages[0] if lang != languages[0] else languages[1]
        assert parse_direction(f"{other}-{lang}") == (other, lang)


@pytest.mark.parametrize("family", ["nllb"], indirect=True)
def test_data_directions_take_the_models_own_codes(family: tuple[str, Path], tmp_path: Path) -> None:
    """data.directions in NLLB's own codes, ajp_Arab among them: the codes name the files ({src}, {tgt})
    and the directions, each trained in the family's layout; the run translates each direction asked
    for by its code or its ISO 639-1 code, as the model's codes name it."""
    from seq2seq.cli.train import train

    _, directory = family
    folder, pairs = tmp_path / "corpus", [("eng_Latn", "deu_Latn"), ("eng_Latn", "ajp_Arab")]
    folder.mkdir()
    for src, tgt in pairs:
        for split, count, seed in (("train", 32, 11), ("valid", 4, 12)):
            for lang, text in ((src, sentences("en", count, seed)), (tgt, sentences("de", count, seed + 100))):
                (folder / f"{split}.{src}-{tgt}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    # quoted: Hydra reads {...} as a dict
    files = [f"data.{split}_{side}='{folder}/{split}.{{src}}-{{tgt}}.{{{side}}}'" for split in ("train", "valid")
             for side in ("src", "tgt")]  # fmt: skip
    directions = "data.directions=[" + ",".join(f"{src}-{tgt}" for src, tgt in pairs) + "]"
    overrides = [*FINE_TUNE, "data.kind=parallel_files", *files, directions, f"data.cache_dir={folder / 'cache'}",
                 f"init_from={directory}"]  # fmt: skip
    run_dir = tmp_path / "run"
    assert train(compose_config("train", overrides), run_dir, overrides=overrides)["step"] == 3
    saved = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["config"]["data"]
    assert list(saved["directions"]) == ["eng_Latn-deu_Latn", "eng_Latn-ajp_Arab"]
    lines = sentences("en", 4, 3)
    by = {}
    for src, tgt in (("eng_Latn", "deu_Latn"), ("en", "de"), ("en", "ajp_Arab")):
        translator = Translator.load(run_dir, beam=1, precision="fp32", device="cpu", src_lang=src, tgt_lang=tgt)
        by[src, tgt] = [nbest[0].tokens for nbest in translator.translate_nbest(lines)]
        code = translator.tokenizers.tgt.token_to_id(translator.languages.tags.code(tgt))
        assert all(tokens[0] == code for tokens in by[src, tgt])  # the target's code forced first
    assert by["eng_Latn", "deu_Latn"] == by["en", "de"] != by["en", "ajp_Arab"]


def test_a_language_the_model_lacks_in_data_directions_is_one_line(family: tuple[str, Path], tmp_path: Path) -> None:
    from seq2seq.cli.train import train

    _, directory = family
    corpus = [o for o in parallel_corpus(tmp_path / "corpus") if not o.startswith("data.tgt_lang=")]
    overrides = [*FINE_TUNE, *corpus, f"init_from={directory}", "data.tgt_lang=tlh"]  # Klingon: ISO 639-3
    with pytest.raises(UserError, match=r"^data\.directions=tlh: not one of the model's \d+ languages") as info:
        train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    assert "\n" not in str(info.value) and not (tmp_path / "run").exists()


# ISO 639-1 code -> the model's language it names, as ISO 639-3 and the model's codes say (written out
# here, not computed): NLLB-200's macrolanguages by the individual language it has (ar: arb, Standard
# Arabic; fa: pes; ms: zsm), a code of two of its languages by the first in sorted order (zh: zho_Hans,
# and zt, LibreTranslate's Traditional Chinese: zho_Hant; ks: kas_Arab); mBART-50's by its region code.
EXPECTED_ALIASES = {
    "nllb": {
        "en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn", "zh": "zho_Hans", "zt": "zho_Hant", "ar": "arb_Arab",
        "fa": "pes_Arab", "ms": "zsm_Latn", "ks": "kas_Arab", "nb": "nob_Latn", "sw": "swh_Latn", "he": "heb_Hebr",
    },
    "mbart50": {"en": "en_XX", "de": "de_DE", "fr": "fr_XX", "zh": "zh_CN", "pt": "pt_XX", "he": "he_IL"},
    "m2m100": {},  # its codes are ISO 639-1's already (en, de, zh)
}  # fmt: skip


def test_iso_639_1_codes_name_the_models_languages_and_an_ambiguous_one_says_which(
    family: tuple[str, Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from seq2seq.data import directions
    from seq2seq.inference.loading import load

    name, directory = family
    _, tokenizers = load_pretrained(str(directory))
    aliases = tokenizers.tgt.aliases()
    assert {code: aliases.get(code) for code in EXPECTED_ALIASES[name]} == EXPECTED_ALIASES[name]
    if name == "m2m100":
        assert {"en", "de", "zh"} <= set(tokenizers.tgt.languages) and not {"en", "de", "zh"} & set(aliases)
    monkeypatch.setattr(directions, "_SAID", set())
    with caplog.at_level(logging.WARNING, logger="seq2seq.data.directions"):
        load(directory, device="cpu", src_lang="en", tgt_lang="zh")
        load(directory, device="cpu", src_lang="en", tgt_lang="zh")  # said once
    said = [r.getMessage() for r in caplog.records if r.name == "seq2seq.data.directions"]
    if name == "nllb":
        assert said == [
            "tgt_lang=zh: read as zho_Hans; ISO 639-1 zh names 2 of the model's languages (zho_Hans, zho_Hant), "
            "ask for zho_Hant (or zt) by name"
        ]
    else:  # mBART-50's zh is zh_CN alone; M2M-100's is its own
        assert said == []


def test_the_server_routes_a_libretranslate_clients_codes(family: tuple[str, Path]) -> None:
    """seq2seq-serve on the directory as it came: the direction source_lang/target_lang name (the
    model's codes or ISO 639-1 ones), routed by the ISO codes a LibreTranslate client sends."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from seq2seq.cli.serve import serve_plan
    from seq2seq.config import ServeConfig
    from seq2seq.inference.loading import load
    from seq2seq.serve.app import create_app
    from seq2seq.serve.command import _load
    from seq2seq.serve.requests import Limits

    def first_model(cfg: ServeConfig):  # the server's plan, its first model loaded
        plan = serve_plan(cfg)
        return _load(plan, plan.models[0])

    name, directory = family
    src_lang, tgt_lang = CODES[name]
    settings = dict(checkpoint=str(directory), beam=2, precision="fp32", device="cpu", threads=1)
    with pytest.raises(
        UserError, match=r"^source_lang, target_lang: a pretrained NLLB-200/M2M-100/mBART-50 model as it came"
    ):
        first_model(ServeConfig(**settings))
    served = first_model(ServeConfig(**settings, source_lang=src_lang, target_lang=tgt_lang))
    lines = sentences("en", 4, 9)
    expected = load(directory, beam=2, precision="fp32", device="cpu", src_lang="en", tgt_lang="de").translate(lines)
    try:
        assert served.info.directions == ("en-de",)
        with TestClient(create_app([served], Limits(16, 200, 8), None)) as client:
            answer = client.post("/translate", json={"q": lines, "source": "en", "target": "de"})
            assert answer.status_code == 200 and answer.json()["translatedText"] == expected
    finally:
        served.batcher.stop()
