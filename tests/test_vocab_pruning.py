"""data.prune_vocab: an NLLB-200, M2M-100 or mBART-50 model fine-tuned on the ids its corpus uses. On the
tiny random models of test_m2m100 (transformers' own config classes, a SentencePiece model trained
there): the kept ids are those the SentencePiece model's encodings of the corpus give, the pruned model
computes transformers' logits at them, translates as the whole model does where that one never picks a
dropped id, and its Hugging Face export (the whole vocabulary again) generates the run's lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import compose_config
from test_m2m100 import (
    CODES,
    FINE_TUNE,
    OUTPUT_TOKENS,
    as_ctranslate2,
    code_token,
    generated,
    hf_directory,
    hf_tokenizer,
    parallel_corpus,
    search_as_ctranslate2,
)

from seq2seq.artifacts.checkpoint import model_from_checkpoint
from seq2seq.artifacts.huggingface import load_pretrained
from seq2seq.artifacts.vocab_rows import kept_rows
from seq2seq.cli.export import export_plan
from seq2seq.config import ExportConfig, UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.export.command import export
from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.target_language import ModelLanguages
from seq2seq.inference.translator import Translator

transformers = pytest.importorskip("transformers", reason="needs `pip install seq2seq[huggingface]`")
sentencepiece = pytest.importorskip("sentencepiece", reason="needs `pip install seq2seq[huggingface]`")

TOLERANCE = 1e-5
SETTINGS = dict(precision="fp32", device="cpu", threads=1, src_lang="en", tgt_lang="de", max_len_a=0)
PRUNE = "data.prune_vocab=true"


def train_run(root: Path, family: str, *extra: str) -> SimpleNamespace:
    from seq2seq.cli.train import train

    directory = hf_directory(root / "model", family)
    overrides = [*FINE_TUNE, *parallel_corpus(root / "corpus"), f"init_from={directory}", *extra]
    train(compose_config("train", overrides), root / "run", overrides=overrides)
    return SimpleNamespace(family=family, model=directory, corpus=root / "corpus", run=root / "run", root=root)


@pytest.fixture(scope="module", params=["nllb", "m2m100", "mbart50"])
def pruned(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A run of 3 updates from the family's tiny model with data.prune_vocab=true."""
    return train_run(tmp_path_factory.mktemp(request.param), request.param, PRUNE)


def corpus_texts(corpus: Path) -> list[str]:
    return [
        line
        for split in ("train", "valid")
        for lang in ("en", "de")
        for line in (corpus / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
    ]


def record_of(run: Path) -> dict:
    return json.loads((run / "fairseq_vocab.json").read_text(encoding="utf-8"))["pruned"]


def test_the_kept_ids_are_the_corpus_pieces_the_special_tokens_and_the_directions_codes(
    pruned: SimpleNamespace,
) -> None:
    """Computed apart: SentencePiece's own pieces of every training and validation line, numbered by the
    family's Hugging Face tokenizer, with <s> <pad> </s> <unk> and the two languages' codes."""
    processor = sentencepiece.SentencePieceProcessor(model_file=str(pruned.model / "sentencepiece.bpe.model"))
    reference = hf_tokenizer(pruned.model, *CODES[pruned.family])
    pieces = {piece for text in corpus_texts(pruned.corpus) for piece in processor.encode(text, out_type=str)}
    expected = set(reference.convert_tokens_to_ids(sorted(pieces)))
    expected |= set(reference.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]))
    expected |= {reference.convert_tokens_to_ids(code_token(pruned.family, code)) for code in CODES[pruned.family]}
    record = record_of(pruned.run)
    rows = transformers.AutoConfig.from_pretrained(str(pruned.model)).vocab_size
    assert record["ids"] == sorted(expected)
    assert record["rows"] == rows and len(expected) < rows / 2  # most of the model's vocabulary goes
    assert sum(record["counts"].values()) == len(expected) and record["counts"]["language_codes"] == 2
    checkpoint = torch.load(pruned.run / "checkpoints" / "last.pt", weights_only=True)
    assert checkpoint["model"]["output.weight"].shape[0] == len(expected)
    assert checkpoint["vocab"]["tokenizer"] == Tokenizers.load(pruned.run).fingerprint()  # the map, by its hash


def pruned_model(family_dir: Path, run: Path) -> tuple[torch.nn.Module, object]:
    """The family's model as it came, its rows cut to the run's pruned tokenizer (as init_from= cuts them)."""
    payload, full = load_pretrained(str(family_dir))
    tokenizers = Tokenizers.load(run)
    return model_from_checkpoint(kept_rows(payload, full, tokenizers)).eval(), tokenizers


def test_the_pruned_model_computes_transformers_logits_at_the_kept_ids(pruned: SimpleNamespace) -> None:
    model, tokenizers = pruned_model(pruned.model, pruned.run)
    src_lang, tgt_lang = CODES[pruned.family]
    lines = corpus_texts(pruned.corpus)
    sources, targets = lines[:6], lines[64 : 64 + 6]  # English lines, then German ones
    reference = hf_tokenizer(pruned.model, src_lang, tgt_lang)
    batch = reference(sources, text_target=targets, return_tensors="pt", padding=True)
    kept = torch.tensor(tokenizers.src.order)  # our pruned id -> transformers'
    to_ours = torch.full((int(kept.max()) + 1,), -1, dtype=torch.long)
    to_ours[kept] = torch.arange(len(kept))
    decoder_input = torch.cat([torch.full((len(sources), 1), 2), batch.labels[:, :-1]], dim=1)
    decoder_input[decoder_input == -100] = 1
    assert (to_ours[batch.input_ids] >= 0).all() and (to_ours[decoder_input] >= 0).all()  # every id kept
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(pruned.model)).eval()
    with torch.no_grad():
        theirs = hf_model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=decoder_input
        ).logits
        ours = model(to_ours[batch.input_ids], to_ours[decoder_input])
    real = batch.labels != 1
    diff = (ours[real] - theirs[:, :, kept][real]).abs().max().item()
    assert diff < TOLERANCE, f"max abs logit difference {diff:.2e} (tolerance {TOLERANCE:.0e})"
    assert ours.shape[-1] == len(kept) < theirs.shape[-1]


def test_greedy_lines_are_the_whole_models_where_it_picks_no_dropped_id(pruned: SimpleNamespace) -> None:
    from seq2seq.inference.loading import load

    model, tokenizers = pruned_model(pruned.model, pruned.run)
    lines = corpus_texts(pruned.corpus)[:64]  # the English training lines: every piece kept
    settings = DecodingSettings(beam=1, max_len_a=0, max_len_b=OUTPUT_TOKENS, src_lang="en", tgt_lang="de")
    languages = ModelLanguages.of({"lang_tag": "language_codes", "directions": ["en-de"]}, tokenizers)
    ours = Translator(model, tokenizers, torch.device("cpu"), settings, languages).translate_nbest(lines)
    whole = load(pruned.model, beam=1, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    theirs = whole.translate_nbest(lines)
    kept, order = set(tokenizers.tgt.order), whole.tokenizers.tgt.order
    comparable = [i for i, nbest in enumerate(theirs) if all(order[t] in kept for t in nbest[0].tokens)]
    # A random model often writes a language code or an unnamed row: M2M-100's picks kept ids alone in 14 of 64.
    assert len(comparable) >= 8, f"only {len(comparable)} of {len(lines)} lines pick kept ids alone"
    assert [ours[i][0].text for i in comparable] == [theirs[i][0].text for i in comparable]
    assert len({theirs[i][0].text for i in comparable}) >= 3  # not one line for all


@pytest.mark.parametrize("beam", [1, 5])
def test_the_huggingface_export_generates_the_runs_lines(pruned: SimpleNamespace, beam: int, tmp_path: Path) -> None:
    """The export has the family's whole vocabulary: the kept rows at their ids, the others the model's own
    (transformers loads it as any such model); its generation config suppresses the dropped ids and
    renormalises, so `generate` writes the run's lines, greedy and beam 5."""
    output, _ = export(
        export_plan(ExportConfig(run=str(pruned.run), output=str(tmp_path / "hf"), format="huggingface"))
    )
    record = record_of(pruned.run)
    exported = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(output))
    original = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(pruned.model))
    rows = original.config.vocab_size
    dropped = sorted(set(range(rows)) - set(record["ids"]))
    assert exported.config.vocab_size == rows
    assert torch.equal(exported.model.shared.weight[dropped], original.model.shared.weight[dropped])
    assert not torch.equal(exported.model.shared.weight[record["ids"]], original.model.shared.weight[record["ids"]])
    config = json.loads((output / "generation_config.json").read_text(encoding="utf-8"))
    assert config["suppress_tokens"] == dropped and config["renormalize_logits"] is True
    lines = corpus_texts(pruned.corpus)[:32]
    translator = Translator.load(pruned.run, beam=beam, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    ours = [nbest[0].tokens for nbest in translator.translate_nbest(lines)]
    to_ours = {model_id: ours_id for ours_id, model_id in enumerate(translator.tokenizers.tgt.order)}
    assert ours == [[to_ours.get(i, -1) for i in ids] for ids in generated(output, pruned.family, lines, beam)]
    assert len({tuple(t) for t in ours}) >= 3


def test_the_ctranslate2_export_stays_pruned_and_translates_as_pytorch(pruned: SimpleNamespace) -> None:
    """<run>/ctranslate2/ (training writes it) keeps the pruned vocabulary, its files the run's tokenizer's."""
    pytest.importorskip("ctranslate2")
    from seq2seq.inference.ctranslate2_engine import CTranslate2Translator

    export_dir = pruned.run / "ctranslate2"
    vocabulary = json.loads((export_dir / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert len(vocabulary) == len(record_of(pruned.run)["ids"])
    lines = corpus_texts(pruned.corpus)[:32]
    engine = CTranslate2Translator.load(export_dir, beam=1, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    pytorch = Translator.load(pruned.run, beam=1, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    assert engine.translate(lines) == pytorch.translate(lines)


@pytest.mark.parametrize("beam", [1, 5])
def test_the_pruned_ctranslate2_export_searches_as_the_whole_vocabulary_restricted_to_the_kept_rows(
    pruned: SimpleNamespace, beam: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """<run>/ctranslate2/, pruned, through ctranslate2.Translator writes the lines of `generate` on the
    run's Hugging Face export (the family's whole vocabulary, the dropped ids suppressed and the rest
    renormalised, as its generation config says), greedy and beam 5, under CTranslate2's rules
    (`as_ctranslate2`); through seq2seq's CTranslate2 engine, the lines of seq2seq's own beam search on
    the pruned run under those rules (test_m2m100_export's test of the whole vocabulary, pruned)."""
    pytest.importorskip("ctranslate2")
    from test_m2m100_export import hf_tokens, raw_ctranslate2

    from seq2seq.inference.ctranslate2_engine import CTranslate2Translator

    output, _ = export(
        export_plan(ExportConfig(run=str(pruned.run), output=str(tmp_path / "hf"), format="huggingface"))
    )
    lines = corpus_texts(pruned.corpus)[:32]
    export_dir = pruned.run / "ctranslate2"
    raw = raw_ctranslate2(export_dir, pruned.family, output, lines, beam)
    assert raw == hf_tokens(output, generated(output, pruned.family, lines, beam, **as_ctranslate2(beam)))
    assert len({tuple(t) for t in raw}) >= 3
    engine = CTranslate2Translator.load(export_dir, beam=beam, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    ours = [nbest[0].tokens for nbest in engine.translate_nbest(lines)]
    search_as_ctranslate2(monkeypatch)
    translator = Translator.load(pruned.run, beam=beam, max_len_b=OUTPUT_TOKENS, **SETTINGS)
    assert [nbest[0].tokens for nbest in translator.translate_nbest(lines)] == ours


@pytest.mark.parametrize("pruned", ["nllb"], indirect=True)
def test_resume_and_averaging_keep_the_map(
    pruned: SimpleNamespace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A resumed run keeps the tokenizer it started with (not pruned again, which would renumber its data),
    says so in the log; its checkpoints average and translate."""
    from seq2seq.cli.average import average_files
    from seq2seq.cli.train import train

    run = tmp_path / "run"
    shutil.copytree(pruned.run, run)
    overrides = [f"resume={run}", "max_steps=6"]
    with caplog.at_level("INFO"):
        summary = train(compose_config("train", [*FINE_TUNE, *overrides]), run, overrides=overrides)
    assert summary["step"] == 6
    kept = len(record_of(pruned.run)["ids"])
    assert any(f"-> {kept} ids kept" in message for message in caplog.messages), caplog.messages
    assert Tokenizers.load(run).fingerprint() == Tokenizers.load(pruned.run).fingerprint()
    steps = sorted((run / "checkpoints").glob("step_*.pt"))
    assert len(steps) >= 2
    averaged = average_files(steps, run / "checkpoints" / "averaged.pt")
    lines = corpus_texts(pruned.corpus)[:4]
    assert len(Translator.load(averaged, beam=2, max_len_b=OUTPUT_TOKENS, **SETTINGS).translate(lines)) == 4


@pytest.mark.parametrize("pruned", ["nllb"], indirect=True)
def test_a_language_the_pruned_vocabulary_dropped_is_one_line(pruned: SimpleNamespace) -> None:
    with pytest.raises(UserError, match=r"^tgt_lang=fra_Latn: not one of the 2 languages the run's pruned") as info:
        Translator.load(pruned.run, **{**SETTINGS, "tgt_lang": "fra_Latn"})
    assert "\n" not in str(info.value) and "deu_Latn, eng_Latn" in str(info.value)


def test_pruning_a_vocabulary_of_no_such_model_is_one_line(tmp_path: Path) -> None:
    """The built-in task trains its own tokenizer, and a Marian model (OPUS-MT) has no language codes:
    nothing to prune. Nothing of either run is left behind."""
    from conftest import TINY_TRAIN
    from test_huggingface import marian_directory

    from seq2seq.cli.train import train

    marian = marian_directory(tmp_path / "marian", "swish", True)
    runs = {
        "trains its own tokenizer": [*TINY_TRAIN, PRUNE],
        f"init_from={marian} is not one": [
            *FINE_TUNE,
            *parallel_corpus(tmp_path / "corpus"),
            f"init_from={marian}",
            PRUNE,
        ],
    }
    for index, (why, overrides) in enumerate(runs.items()):
        run = tmp_path / f"run{index}"
        with pytest.raises(UserError, match=r"data\.prune_vocab=True: prunes the vocabulary of an NLLB-200") as info:
            train(compose_config("train", overrides), run, overrides=overrides)
        assert "\n" not in str(info.value) and why in str(info.value) and not run.exists()


def test_pruning_a_streamed_corpus_is_one_line(tmp_path: Path) -> None:
    from seq2seq.cli.train import train

    directory = hf_directory(tmp_path / "model", "nllb")
    overrides = [
        *FINE_TUNE,
        *parallel_corpus(tmp_path / "corpus"),
        f"init_from={directory}",
        PRUNE,
        "data.streaming=true",
    ]
    with pytest.raises(UserError, match=r"^config error: data\.prune_vocab=True: counts the ids to keep") as info:
        train(compose_config("train", overrides), tmp_path / "run", overrides=overrides)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("pruned", ["nllb"], indirect=True)
def test_the_export_without_the_model_it_was_pruned_from_is_one_line(pruned: SimpleNamespace, tmp_path: Path) -> None:
    moved = pruned.root / "moved"
    pruned.model.rename(moved)
    try:
        with pytest.raises(
            UserError, match=r"its vocabulary was pruned \(data\.prune_vocab\) from .*not there"
        ) as info:
            export(export_plan(ExportConfig(run=str(pruned.run), output=str(tmp_path / "hf"), format="huggingface")))
    finally:
        moved.rename(pruned.model)
    assert "\n" not in str(info.value) and not (tmp_path / "hf").exists()


def test_the_counts_script_counts_the_600m_shape_and_a_models_kept_ids(tmp_path: Path) -> None:
    """scripts/prune_counts.py: the 600M architecture loses exactly the dropped rows x d_model (one
    embedding, tied to the output layer); --model's count is the pipeline's on the same text."""
    import gzip

    from script_module import load_script

    script = load_script("prune_counts")
    full, pruned = script.shape_counts(256206), script.shape_counts(10000)
    assert full["parameters"] == 615073792  # as transformers counts NLLB-200-distilled-600M's
    assert full["parameters"] - pruned["parameters"] == (256206 - 10000) * 1024
    assert pruned["embedding_parameters"] == 10000 * 1024
    model = hf_directory(tmp_path / "model", "nllb")
    corpus = tmp_path / "multi30k"
    corpus.mkdir()
    lines = {("train", "en"): "a man sits.", ("train", "de"): "ein Mann sitzt.", ("val", "en"): "a dog runs."}
    for (split, lang), line in {**lines, ("val", "de"): "ein Hund läuft."}.items():
        with gzip.open(corpus / f"{split}.{lang}.gz", "wt", encoding="utf-8") as handle:
            handle.write(line + "\n")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model / "sentencepiece.bpe.model"))
    texts = [*lines.values(), "ein Hund läuft."]
    pieces = {piece for text in texts for piece in processor.encode(text, out_type=str)}
    counted = script.kept_ids(model, corpus)
    assert counted["kept"] == len(pieces) + 4 + 2 and counted["counts"]["corpus"] == len(pieces)


@pytest.mark.parametrize("pruned", ["nllb"], indirect=True)
def test_the_server_serves_a_pruned_run_by_a_libretranslate_clients_codes(pruned: SimpleNamespace) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from seq2seq.cli.serve import serve_plan
    from seq2seq.config import ServeConfig
    from seq2seq.serve.app import create_app
    from seq2seq.serve.command import _load
    from seq2seq.serve.requests import Limits

    plan = serve_plan(ServeConfig(run=str(pruned.run), beam=2, precision="fp32", device="cpu", threads=1))
    served = _load(plan, plan.models[0])
    lines = corpus_texts(pruned.corpus)[:4]
    expected = Translator.load(
        pruned.run, beam=2, precision="fp32", device="cpu", src_lang="en", tgt_lang="de"
    ).translate(lines)
    try:
        assert served.info.directions == ("en-de",)
        with TestClient(create_app([served], Limits(16, 200, 8), None)) as client:
            answer = client.post("/translate", json={"q": lines, "source": "en", "target": "de"})
            assert answer.status_code == 200 and answer.json()["translatedText"] == expected
    finally:
        served.batcher.stop()


@pytest.mark.parametrize("pruned", ["nllb"], indirect=True)
def test_a_pruned_teacher_distils_into_a_student_of_its_own_vocabulary(
    pruned: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The student trains its own tokenizer on the teacher's translations: the teacher's data.prune_vocab
    (its pretrained model's vocabulary) is not the student's (regression: the student was refused)."""
    from seq2seq.cli.distill import main

    output = tmp_path / "out"
    argv = [
        f"teacher={pruned.run}", f"output={output}", "student=tiny", "threads=1", "speed_lines=4",
        f"cache={tmp_path / 'c'}", "train.max_steps=4", "speed_threads=[1]", "data.vocab_size=400",
    ]  # fmt: skip
    capsys.readouterr()
    try:
        main(argv)
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    assert json.loads(out)["student"]["steps"] == 4
    student = torch.load(output / "student" / "checkpoints" / "last.pt", weights_only=True)["config"]["data"]
    assert student["prune_vocab"] is False and student["tokenizer"] == "sentencepiece"
