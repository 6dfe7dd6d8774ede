"""Marian (OPUS-MT) models in and out, without the internet: tiny random `MarianMTModel`s built with
transformers and tiny SentencePiece models trained here. Imported models compute transformers'
logits; fine-tuned and from-scratch models exported as Marian decode with `generate` as
seq2seq's Translator does; import -> export gives back the original."""

from __future__ import annotations

import gzip
import json
import shutil
from itertools import islice
from pathlib import Path

import pytest
import torch
from conftest import MULTI30K, SENTENCEPIECE_LINES, TINY_TRAIN, compose_config, train_multilingual

from seq2seq.artifacts.checkpoint import atomic_save, model_from_checkpoint
from seq2seq.artifacts.marian import load_pretrained
from seq2seq.cli.export import export_plan
from seq2seq.cli.train import train
from seq2seq.config import DataConfig, ExportConfig, TranslateConfig, UserError
from seq2seq.data.builtin import reverse_task
from seq2seq.data.corpus import read_lines
from seq2seq.data.tokenizer import EOS_ID, PAD_ID
from seq2seq.export.command import export
from seq2seq.inference.translator import Translator

transformers = pytest.importorskip("transformers", reason="needs `pip install seq2seq[huggingface]`")
sentencepiece = pytest.importorskip("sentencepiece", reason="needs `pip install seq2seq[huggingface]`")

TOLERANCE = 1e-4  # fp32, the same arithmetic in another order


def corpus_lines() -> tuple[list[str], list[str]]:
    """A few hundred sentence pairs: the built-in task, and Multi30k en-de where it is on disk."""
    pairs = reverse_task(DataConfig(task_train_size=300, task_valid_size=20, task_test_size=20))["train"]
    src, tgt = list(pairs[0]), list(pairs[1])
    if MULTI30K is not None:
        for lang, side in (("en", src), ("de", tgt)):
            with gzip.open(MULTI30K / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
                side += [line.strip() for line in islice(handle, 300)]
    return src, tgt


def marian_directory(directory: Path, activation: str, shared: bool, seed: int = 0) -> Path:
    """A random tiny Marian model with SentencePiece tokenizers trained on `corpus_lines`, saved as
    transformers saves OPUS-MT models (vocab.json numbering: </s> 0, <unk> 1, ..., <pad> last)."""
    directory.mkdir(parents=True)
    src, tgt = corpus_lines()
    for name, lines in (("source", src), ("target", tgt)):
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_prefix=str(directory / name),
            vocab_size=120,
            model_type="unigram",
            hard_vocab_limit=False,
            minloglevel=2,
        )
        (directory / f"{name}.model").rename(directory / f"{name}.spm")
    pieces: list[str] = []
    for name in ("source", "target"):
        processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{name}.spm"))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    ordinary = sorted(set(pieces) - {"<unk>", "<s>", "</s>", "<pad>"})
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(ordinary)}}
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    torch.manual_seed(seed)
    config = transformers.MarianConfig(
        vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        activation_function=activation,
        scale_embedding=True,
        share_encoder_decoder_embeddings=shared,
        pad_token_id=vocab["<pad>"],
        eos_token_id=0,
        forced_eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"],
        init_std=0.2,  # larger than OPUS-MT's weights: logits that differ from token to token
    )
    model = transformers.MarianMTModel(config)
    with torch.no_grad():
        model.final_logits_bias.normal_()  # zero in a new model: make it count
    model.save_pretrained(str(directory))
    tokenizer = transformers.MarianTokenizer(
        str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json")
    )
    tokenizer.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module", params=[("swish", True), ("relu", False)], ids=["swish-shared", "relu-separate"])
def marian(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    activation, shared = request.param
    return marian_directory(tmp_path_factory.mktemp("marian") / "model", activation, shared)


SENTENCES = ["a b c d", "Two young guys with shaggy hair look at their hands.", "x", "Ein Mann schläft."]


def hf_logits(directory: Path, sources: list[str], targets: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' own forward pass: (logits (B, T, V), attention mask of the targets (B, T))."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    batch = tokenizer(sources, text_target=targets, return_tensors="pt", padding=True)
    labels = batch.pop("labels")
    with torch.no_grad():
        start = torch.full((len(sources), 1), model.config.decoder_start_token_id)
        decoder_input_ids = torch.cat([start, labels[:, :-1]], dim=1)
        decoder_input_ids[decoder_input_ids == -100] = model.config.pad_token_id
        out = model(**batch, decoder_input_ids=decoder_input_ids).logits
    return out, labels != model.config.pad_token_id


def test_imported_model_computes_transformers_logits(marian: Path) -> None:
    payload, tokenizers = load_pretrained(str(marian))
    model = model_from_checkpoint(payload).eval()
    reference = transformers.MarianTokenizer.from_pretrained(str(marian))
    src_ids = tokenizers.encode_src(SENTENCES)
    tgt_ids = tokenizers.encode_tgt(SENTENCES)
    order = torch.tensor(tokenizers.tgt.order)
    # The SentencePiece tokenizers give transformers' ids (in our numbering).
    assert [[tokenizers.src.order[i] for i in ids] + [0] for ids in src_ids] == reference(SENTENCES).input_ids
    width = max(map(len, src_ids)) + 1
    src = torch.full((len(SENTENCES), width), PAD_ID)
    tgt_in = torch.full((len(SENTENCES), max(map(len, tgt_ids)) + 1), PAD_ID)  # starts from pad, as Marian
    for row, (s, t) in enumerate(zip(src_ids, tgt_ids, strict=True)):
        src[row, : len(s) + 1] = torch.tensor([*s, EOS_ID])
        tgt_in[row, 1 : len(t) + 1] = torch.tensor(t)
    with torch.no_grad():
        ours = model(src, tgt_in)
    theirs, real = hf_logits(marian, SENTENCES, SENTENCES)
    theirs = theirs[:, :, order]  # their vocabulary columns in our order
    real = real[:, : ours.size(1)]
    diff = (ours[real] - theirs[real]).abs().max().item()
    assert diff < TOLERANCE, f"max abs logit difference {diff:.2e} (tolerance {TOLERANCE:.0e})"
    assert ours[real].abs().max() > 1.0  # logits that mean something, not all near zero


def save_as_checkpoint(payload: dict, tokenizers, directory: Path) -> Path:
    path = directory / "checkpoints" / "last.pt"
    atomic_save(payload, path)
    tokenizers.save(directory)
    return path


def test_import_then_export_gives_back_the_model(marian: Path, tmp_path: Path) -> None:
    payload, tokenizers = load_pretrained(str(marian))
    checkpoint = save_as_checkpoint(payload, tokenizers, tmp_path / "run")
    output, _ = export(
        export_plan(ExportConfig(checkpoint=str(checkpoint), output=str(tmp_path / "hf"), format="huggingface"))
    )
    original, _ = hf_logits(marian, SENTENCES, SENTENCES)
    again, _ = hf_logits(output, SENTENCES, SENTENCES)
    config = json.loads((output / "config.json").read_text())
    # Every token's logit comes back, but pad's: the export gives it none of the probability (as Marian's
    # own vocabulary, which has no pad to output, and as seq2seq's search).
    pad = config["pad_token_id"]
    others = torch.arange(original.size(-1)) != pad
    diff = (original[..., others] - again[..., others]).abs().max().item()
    assert diff < TOLERANCE, f"round trip: max abs logit difference {diff:.2e}"
    assert torch.softmax(again, dim=-1)[..., pad].max() == 0.0
    assert config["architectures"] == ["MarianMTModel"]
    assert (output / "README.md").is_file()


def generate(directory: Path, lines: list[str], beam: int, budgets: list[int]) -> list[tuple[str, list[int]]]:
    """transformers' generate, one line at a time with seq2seq's output budget for it (EOS included,
    as `max_new_tokens` counts it): (text, generated ids without the start token and EOS)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(directory)).eval()
    out = []
    for line, budget in zip(lines, budgets, strict=True):
        batch = tokenizer([line], return_tensors="pt")
        with torch.no_grad():  # early_stopping=True: done at `beam` finished hypotheses, seq2seq's rule
            ids = model.generate(**batch, num_beams=beam, max_new_tokens=budget, early_stopping=True)[0, 1:].tolist()
        out.append(
            (tokenizer.decode(ids, skip_special_tokens=True), [i for i in ids if i != model.config.eos_token_id])
        )
    return out


def agreement(run_dir: Path, export_dir: Path, lines: list[str]) -> dict[int, float]:
    """Fraction of lines on which generate and seq2seq's Translator write the same, greedy (1) and
    beam 5. Where beam search differs, generate's hypothesis ran to the length budget: there a search
    ranks long degenerate prefixes, and transformers bans pad and <s> after its log-softmax, while
    seq2seq renormalises the rest as CTranslate2 does (so that its two engines agree), so either beam
    may end with the hypothesis that scores better."""
    result = {}
    for beam in (1, 5):
        translator = Translator.load(run_dir, beam=beam, precision="fp32", device="cpu", max_len_a=1.5, max_len_b=10)
        ours = [nbest[0] for nbest in translator.translate_nbest(lines)]
        budgets = [min(int(len(ids) * 1.5 + 10), translator.max_positions - 1) for ids in translator.encode(lines)]
        theirs = generate(export_dir, lines, beam, budgets)
        same = [a.text == text for a, (text, _) in zip(ours, theirs, strict=True)]
        result[beam] = sum(same) / len(lines)
        for line, (_, ids), agree, budget in zip(lines, theirs, same, budgets, strict=True):
            if not agree:
                assert len(ids) + 1 == budget, f"{line!r}: generate differs within the length budget (beam {beam})"
    return result


FINE_TUNE = [*TINY_TRAIN, "max_steps=6", "valid_every=3", "save_every=3", "optim.lr=1e-3", "optim.warmup=2"]
VALID = reverse_task(DataConfig(task_train_size=400, task_valid_size=20))["valid"][0]


def test_fine_tuned_marian_model_exports_and_generates_as_translate(marian: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    summary = train(compose_config("train", [*FINE_TUNE, f"init_from={marian}"]), run_dir)
    assert summary["step"] == 6
    saved = json.loads(json.dumps(torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["config"]))
    assert saved["model"]["decoder_start"] == "pad" and saved["init_from"] == str(marian)
    output, _ = export(export_plan(ExportConfig(run=str(run_dir), output=str(tmp_path / "hf"), format="huggingface")))
    agree = agreement(run_dir, output, VALID)
    assert agree[1] == 1.0 and agree[5] >= 0.7, f"generate vs translate line agreement: {agree}"
    # The run's own CTranslate2 export (its output bias, the zero start vector) decodes as PyTorch does.
    from seq2seq.inference.ctranslate2_engine import CTranslate2Translator

    for beam in (1, 5):
        settings = dict(beam=beam, precision="fp32", device="cpu")
        expected = Translator.load(run_dir, **settings).translate(VALID)
        assert CTranslate2Translator.load(run_dir, **settings).translate(VALID) == expected


def test_resume_of_a_fine_tuned_run(marian: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config("train", [*FINE_TUNE, "max_steps=3", f"init_from={marian}"]), run_dir)
    summary = train(
        compose_config("train", [*FINE_TUNE, f"resume={run_dir}", "max_steps=6"]),
        run_dir,
        overrides=[f"resume={run_dir}", "max_steps=6"],
    )
    assert summary["step"] == 6


def test_from_scratch_model_exports_as_marian(tmp_path: Path) -> None:
    """Our interleaved sinusoids, BOS start and byte-level BPE go to Marian as permuted dimensions,
    decoder_start_token_id=BOS and a PreTrainedTokenizerFast."""
    run_dir = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=30", "valid_every=30", "save_every=30"]), run_dir)
    output, _ = export(export_plan(ExportConfig(run=str(run_dir), output=str(tmp_path / "hf"), format="huggingface")))
    translator = Translator.load(run_dir, beam=1, precision="fp32", device="cpu")
    src = torch.tensor([[*ids, EOS_ID] for ids in translator.tokenizers.encode_src(["a b c"])])
    tgt = torch.tensor([[1, *translator.tokenizers.encode_tgt(["C B A"])[0]]])
    with torch.no_grad():
        ours = translator.model(src, tgt)
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(output)).eval()
        theirs = model(input_ids=src, decoder_input_ids=tgt).logits
    diff = (ours - theirs).abs().max().item()
    assert diff < TOLERANCE, f"max abs logit difference {diff:.2e}"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(output))
    assert tokenizer(["a b c"]).input_ids == src.tolist()
    agree = agreement(run_dir, output, VALID)
    assert agree[1] == 1.0 and agree[5] >= 0.7, f"generate vs translate line agreement: {agree}"


def test_pre_norm_model_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "model.norm_first=true"]), run_dir)
    with pytest.raises(UserError, match="pre-norm.*format=safetensors"):
        export(export_plan(ExportConfig(run=str(run_dir), output=str(tmp_path / "hf"), format="huggingface")))
    assert not (tmp_path / "hf").exists()


def test_a_dropped_residual_is_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "model.encoder_drop_residual_layer=0"]), run_dir)
    with pytest.raises(UserError, match=r"model\.encoder_drop_residual_layer=0: MarianMTModel.*format=safetensors"):
        export(export_plan(ExportConfig(run=str(run_dir), output=str(tmp_path / "hf"), format="huggingface")))
    assert not (tmp_path / "hf").exists()


def test_architecture_override_is_one_line_error(marian: Path, tmp_path: Path) -> None:
    overrides = [f"init_from={marian}", "model.d_model=64"]
    with pytest.raises(UserError, match=r"model\.d_model=64.*cannot change"):
        train(compose_config("train", [*TINY_TRAIN, *overrides]), tmp_path / "run", overrides=overrides)


def test_hub_id_offline_is_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="could not be downloaded from the Hugging Face Hub"):
        train(compose_config("train", [*TINY_TRAIN, "init_from=Helsinki-NLP/opus-mt-en-de"]), tmp_path / "run")


def test_missing_extra_names_it(marian: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"seq2seq\[huggingface\]"):
        load_pretrained(str(marian))


def test_attention_plots_start_from_the_models_start_token(marian: Path) -> None:
    """A Marian model's targets start from pad: the plotted weights are those of that input."""
    from seq2seq.inference.attention_plots import teacher_forced_attention

    payload, tokenizers = load_pretrained(str(marian))
    model = model_from_checkpoint(payload).eval()
    src_ids = [*tokenizers.encode_src(["a b c"])[0], EOS_ID]
    out_ids = tokenizers.encode_tgt(["C B A"])[0]
    plotted = teacher_forced_attention(model, src_ids, out_ids)["cross"]
    record: dict = {}
    with torch.no_grad():
        memory, src_mask = model.encode(torch.tensor([src_ids]))
        model.decode(torch.tensor([[PAD_ID, *out_ids]]), memory, src_mask, record=record)
    for layer, weights in enumerate(record["cross"]):
        assert torch.allclose(plotted[layer], weights[0]), f"layer {layer}"


# --- a run trained here with data.tokenizer=sentencepiece ------------------------------------------


@pytest.fixture(scope="module")
def sentencepiece_export(sentencepiece_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("hf") / "model"
    export(export_plan(ExportConfig(run=str(sentencepiece_run), output=str(output), format="huggingface")))
    return output


def test_a_sentencepiece_run_exports_a_marian_directory(sentencepiece_run: Path, sentencepiece_export: Path) -> None:
    """OPUS-MT's files, its numbering (pad last), generation_config.json with seq2seq-translate's
    defaults, and a card without a path of this machine or a task transformers 5 lacks."""
    files = {p.name for p in sentencepiece_export.iterdir()}
    assert {"source.spm", "target.spm", "vocab.json", "config.json", "generation_config.json", "README.md"} <= files
    vocab = json.loads((sentencepiece_export / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == json.loads((sentencepiece_run / "vocab.json").read_text(encoding="utf-8"))
    config = json.loads((sentencepiece_export / "config.json").read_text())
    assert config["pad_token_id"] == config["decoder_start_token_id"] == len(vocab) - 1 == vocab["<pad>"]
    generation = json.loads((sentencepiece_export / "generation_config.json").read_text())
    defaults = TranslateConfig()
    assert (generation["num_beams"], generation["length_penalty"]) == (defaults.beam, defaults.length_penalty)
    assert generation["early_stopping"] is True
    max_positions = torch.load(sentencepiece_run / "checkpoints" / "last.pt", weights_only=True)["config"]["model"][
        "max_positions"
    ]
    assert generation["max_length"] == max_positions + 1  # the longest budget, + the start token
    card = (sentencepiece_export / "README.md").read_text(encoding="utf-8")
    assert "pipeline_tag" not in card and str(sentencepiece_run.parent) not in card
    assert "SentencePiece unigram" in card and "ct2-transformers-converter" in card


def ct2_budgets(sources: list[list[str]], max_positions: int) -> list[int]:
    """seq2seq-translate's output budget per line (</s> included), written out again here."""
    return [min(int(len(s) * 1.5 + 10), max_positions) for s in sources]  # s ends with </s>


@pytest.mark.parametrize("beam", [1, 5])
def test_ct2_transformers_converter_takes_the_export_and_translates_as_translate(
    sentencepiece_run: Path, sentencepiece_export: Path, tmp_path: Path, beam: int
) -> None:
    """CTranslate2's own converter (as `ct2-transformers-converter --model`), then CTranslate2
    with seq2seq-translate's options: each line's budget, an immediate </s> allowed. Nothing to
    suppress: the converter leaves pad out of the vocabulary."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    converted = ctranslate2.converters.TransformersConverter(str(sentencepiece_export)).convert(str(tmp_path / "ct2"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(sentencepiece_export))
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(line).input_ids) for line in SENTENCEPIECE_LINES]
    translator = ctranslate2.Translator(converted, device="cpu", compute_type="float32", intra_threads=1)
    theirs = []
    for source, budget in zip(sources, ct2_budgets(sources, 256), strict=True):
        (result,) = translator.translate_batch(
            [source], beam_size=beam, length_penalty=1.0, max_decoding_length=budget - 1, min_decoding_length=0
        )
        theirs.append(tokenizer.convert_tokens_to_string(result.hypotheses[0]))
    ours = Translator.load(sentencepiece_run, beam=beam, precision="fp32", device="cpu").translate(SENTENCEPIECE_LINES)
    assert theirs == ours


def test_plain_generate_writes_translates_lines(sentencepiece_run: Path, sentencepiece_export: Path) -> None:
    """`model.generate(**batch)` with no option at all, a padded batch: seq2seq-translate's lines,
    wherever the command's line ended with </s> within its budget (a line the command cuts runs on)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(sentencepiece_export))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(sentencepiece_export)).eval()
    batch = tokenizer(SENTENCEPIECE_LINES, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)
    translator = Translator.load(sentencepiece_run, precision="fp32", device="cpu")
    hypotheses = [nbest[0] for nbest in translator.translate_nbest(SENTENCEPIECE_LINES)]
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(line).input_ids) for line in SENTENCEPIECE_LINES]
    ended = [len(h.tokens) + 1 < budget for h, budget in zip(hypotheses, ct2_budgets(sources, 256), strict=True)]
    assert sum(ended) >= len(ended) // 2
    for line, hypothesis, text, within in zip(SENTENCEPIECE_LINES, hypotheses, theirs, ended, strict=True):
        if within:
            assert text == hypothesis.text, line


def test_a_multilingual_export_takes_opus_mt_tags_in_marian_tokenizer(tmp_path: Path) -> None:
    """A multilingual SentencePiece run (the tag starts the source: data.lang_tag's default) exported as
    Marian: `>>fr<< text` through MarianTokenizer and plain `generate` writes what seq2seq-translate
    tgt_lang=fr writes, in that language, for each target."""
    run = train_multilingual(tmp_path / "ml", "data.tokenizer=sentencepiece")
    output = tmp_path / "hf"
    export(export_plan(ExportConfig(run=str(run.path), output=str(output), format="huggingface")))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(output))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(output)).eval()
    translator = Translator.load(run.path, precision="fp32", device="cpu")
    lines = read_lines(run.corpus / "test.en-de.en")
    for target in ("de", "fr"):
        batch = tokenizer([f">>{target}<< {line}" for line in lines], return_tensors="pt", padding=True)
        assert (batch.input_ids[:, 0] == tokenizer.convert_tokens_to_ids(f">>{target}<<")).all()  # one token
        with torch.no_grad():
            theirs = tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)
        assert theirs == translator.with_languages("en", target).translate(lines)
        words = " ".join(theirs).split()
        assert sum(word[:2] == target for word in words) / len(words) >= 0.9, theirs


@pytest.mark.parametrize("beam", [1, 4])
def test_a_marian_directory_decodes_as_the_run_it_was_exported_from(
    sentencepiece_run: Path, sentencepiece_export: Path, beam: int
) -> None:
    """The loader reads a Marian directory as init_from= reads it (the same model, pad's column aside,
    which search never outputs), so it writes the run's lines; it was refused as "not one PyTorch
    translation reads"."""
    from seq2seq.inference.loading import load

    settings = dict(beam=beam, precision="fp32", device="cpu")
    ours = Translator.load(sentencepiece_run, **settings).translate(SENTENCEPIECE_LINES)
    marian = Translator.load(sentencepiece_export, **settings)
    assert marian.translate(SENTENCEPIECE_LINES) == ours
    engine = load(sentencepiece_export, **settings)  # engine=auto: a Marian directory is PyTorch's
    assert engine.kind == "torch" and engine.translate(SENTENCEPIECE_LINES) == ours


def test_init_from_the_export_starts_a_run_with_its_weights(
    sentencepiece_run: Path, sentencepiece_export: Path, tmp_path: Path
) -> None:
    payload, tokenizers = load_pretrained(str(sentencepiece_export))
    imported = model_from_checkpoint(payload).eval()
    original = Translator.load(sentencepiece_run, precision="fp32", device="cpu")
    assert tokenizers.fingerprint() == original.tokenizers.fingerprint()
    src = torch.tensor([[*ids, EOS_ID] for ids in tokenizers.encode_src(["a b c d"])])
    tgt = torch.tensor([[PAD_ID, *tokenizers.encode_tgt(["D C B A"])[0]]])
    with torch.no_grad():
        ours, theirs = original.model(src, tgt), imported(src, tgt)
    diff = (ours[..., 1:] - theirs[..., 1:]).abs().max().item()  # pad's column: never an output of either
    assert diff < TOLERANCE, f"max abs logit difference {diff:.2e}"
    overrides = [*TINY_TRAIN, "max_steps=2", "valid_every=2", "save_every=2", f"init_from={sentencepiece_export}"]
    summary = train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    assert summary["step"] == 2


def test_init_from_a_byte_level_export_says_what_to_train_with(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from seq2seq.cli.export import main as export_main

    run_dir = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2", "save_every=2"]), run_dir)
    export_main([f"run={run_dir}", f"output={tmp_path / 'hf'}", "format=huggingface"])
    assert "ct2-transformers-converter and init_from= take a run trained with data.tokenizer=sentencepiece" in (
        capsys.readouterr().out
    )
    overrides = [*TINY_TRAIN, f"init_from={tmp_path / 'hf'}"]
    with pytest.raises(UserError, match=r"^init_from=.*byte-level.*data\.tokenizer=sentencepiece") as error:
        train(compose_config("train", overrides), tmp_path / "again", overrides=overrides)
    assert "\n" not in str(error.value)


def test_a_marian_config_that_disagrees_with_its_weights_is_one_line(marian: Path, tmp_path: Path) -> None:
    # transformers' 44-line RuntimeError ("size mismatch for ...") reached the user.
    from seq2seq.artifacts.marian import load_pretrained

    broken = tmp_path / "broken"
    shutil.copytree(marian, broken)
    config = json.loads((broken / "config.json").read_text())
    config["d_model"] = 48  # the weights are 32 wide
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError) as info:
        load_pretrained(str(broken))
    message = str(info.value)
    assert message.startswith(f"{broken}: transformers could not load the model: ") and "\n" not in message
