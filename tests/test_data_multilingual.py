"""Several directions in one run (data.directions): tags, readers, sampling, bad input, and a
single-direction run left exactly as it was."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from seq2seq.config import DataConfig, UserError, as_dict, validate_directions
from seq2seq.data.batching import EpochBatches, collate, split_batch
from seq2seq.data.corpus import iter_parallel
from seq2seq.data.corpus_plan import plan_corpus
from seq2seq.data.directions import (
    Direction,
    check_same_directions,
    check_tags_free,
    configured_directions,
    direction_config,
    language_tags,
)
from seq2seq.data.epoch_mix import direction_shares, epoch_counts, epoch_rows
from seq2seq.data.pipeline import CACHE_VERSION, cache_key, content_digest, keep_pair, prepare_data
from seq2seq.data.sentencepiece_training import train_sentencepiece
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizers
from seq2seq.inference.target_language import ModelLanguages

TAGS = [">>de<<", ">>en<<", ">>fr<<"]
LANGUAGES = ("en", "de", "fr")


def sentence(lang: str, i: int) -> str:
    """A sentence only `lang` writes: its words are lang0 .. lang9, so a decoded target shows its language."""
    rng = np.random.default_rng([i, LANGUAGES.index(lang)])
    return " ".join(f"{lang}{w}" for w in rng.integers(0, 10, size=3 + i % 5))


def texts(lang: str, n: int = 60) -> list[str]:
    return [sentence(lang, i) for i in range(n)]


# ---- the tags in both tokenizers -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_byte_level_tags_are_single_ids_that_text_never_yields(kind):
    tokenizers = Tokenizers.train(texts("en"), texts("de") + texts("fr"), kind, 300, joint=True, tags=TAGS)
    tok = tokenizers.src
    for index, tag in enumerate(TAGS):
        tag_id = tok.token_to_id(tag)
        assert tag_id == 4 + index  # after pad, BOS, EOS, UNK
        assert tok.id_to_token(tag_id) == tag
        assert tok.decode([tag_id], skip_special_tokens=False) == tag  # the tag back, from one id
    tag_ids = set(range(4, 4 + len(TAGS)))
    for text in (">>de<<", "a >>de<< b", ">>fr<<en1 en2"):
        ids = tokenizers.encode_src([text])[0]
        assert not tag_ids & set(ids), text  # text is text: it cannot ask for a language
        assert tok.decode(ids) == text
    # A decoded target drops its tag, as it drops BOS and EOS.
    body = tokenizers.encode_tgt(["de1 de2"])[0]
    assert tokenizers.decode_tgt([[tok.token_to_id(">>de<<"), *body]]) == ["de1 de2"]


def test_sentencepiece_tags_are_vocabulary_entries_before_pad(tmp_path):
    tokenizers = train_sentencepiece(
        texts("en"), texts("de") + texts("fr"), "unigram", 400, joint=True, directory=tmp_path, tags=TAGS
    )
    vocab = json.loads((tmp_path / "vocab.json").read_text())
    pieces = sorted(vocab, key=vocab.get)
    assert pieces[-len(TAGS) - 1 :] == [*TAGS, "<pad>"]  # OPUS-MT's layout: pad stays last
    tok = tokenizers.src
    for tag in TAGS:
        assert tok.id_to_token(tok.token_to_id(tag)) == tag
    de = tok.token_to_id(">>de<<")
    assert de not in tokenizers.encode_src(["en1 >>de<< en2"])[0]  # inside a sentence: text
    # A leading tag is the tag, as MarianTokenizer reads OPUS-MT input (">>fra<< Hello").
    assert tokenizers.encode_src([">>de<< en1"])[0][0] == de
    body = tokenizers.encode_tgt(["de1 de2"])[0]
    assert tokenizers.decode_tgt([[de, *body]]) == ["de1 de2"]


def test_a_tag_that_is_already_a_piece_is_refused():
    with pytest.raises(UserError, match=r"data\.directions: the tag >>de<< already is an entry of vocab\.json"):
        check_tags_free(["▁a", ">>de<<"], [">>de<<", ">>fr<<"], "vocab.json")
    check_tags_free(["▁a", ">>"], [">>de<<"], "vocab.json")  # no error


def test_a_tokenizer_without_the_tags_is_not_the_run_s():
    untagged = Tokenizers.train(texts("en"), texts("de"), "bpe", 300, joint=True)
    cfg = DataConfig(kind="multi30k", directions=["en-de"])
    with pytest.raises(UserError, match=r"data\.directions: the tokenizer has no >>de<< token"):
        language_tags(cfg.lang_tag, configured_directions(cfg), untagged)


# ---- reading and tagging every direction ------------------------------------------------------------

SIZES = {"en-de": 60, "en-fr": 20, "de-en": 8}  # unequal, so the temperature matters


def write_corpus(root: Path) -> dict[str, str]:
    """parallel_files, one file pair per direction and split, named with {src} and {tgt}."""
    for name, n in SIZES.items():
        src, tgt = name.split("-")
        for split, count in (("train", n), ("valid", 4)):
            offset = 1000 if split == "valid" else 0
            (root / f"{split}.{name}.{src}").write_text("\n".join(sentence(src, offset + i) for i in range(count)))
            (root / f"{split}.{name}.{tgt}").write_text("\n".join(sentence(tgt, offset + i) for i in range(count)))
    return {
        f"{split}_{side}": str(root / f"{split}.{{src}}-{{tgt}}.{{{side}}}")
        for split in ("train", "valid")
        for side in ("src", "tgt")
    }


def multilingual_cfg(root: Path, **extra) -> DataConfig:
    return DataConfig(
        kind="parallel_files",
        directions=list(SIZES),
        vocab_size=300,
        cache_dir=str(root / "cache"),
        **write_corpus(root),
        **extra,
    )


@pytest.fixture(scope="module")
def prefixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefixed")
    cfg = multilingual_cfg(root)
    return cfg, prepare_data(cfg)


@pytest.fixture(scope="module")
def decoder_started(tmp_path_factory):
    return prepared(tmp_path_factory.mktemp("decoder_start"), lang_tag="decoder_start")


def prepared(root: Path, **extra):
    """A multilingual corpus under `root`, its config (with `extra`) and the data prepared from it."""
    cfg = multilingual_cfg(root, **extra)
    return cfg, prepare_data(cfg)


def test_every_source_starts_with_its_direction_s_tag(prefixed):
    cfg, data = prefixed
    tags, tok = data.languages, data.tokenizers
    assert tags.placement == "source_prefix" and tags.directions == tuple(SIZES)
    assert data.train.direction_names == tuple(SIZES)
    assert np.bincount(data.train.directions).tolist() == list(SIZES.values())  # every pair kept, none lost
    rows = data.valid.direction_rows()
    assert list(rows) == list(SIZES) and [r.tolist() for r in rows.values()] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
    ]
    for split in (data.train, data.valid):
        for row in range(len(split)):
            direction = Direction(*split.direction_names[split.directions[row]].split("-"))
            src, tgt = split.src[row].tolist(), split.tgt[row].tolist()
            assert src[0] == tok.src.token_to_id(f">>{direction.tgt}<<")
            assert {w[:2] for w in tok.decode_tgt([tgt])[0].split()} == {direction.tgt}  # the right pair
            assert {w[:2] for w in tok.src.decode(src[1:]).split()} == {direction.src}
            assert len(set(src) & set(tags.ids.values())) == 1  # the tag once, nowhere else


@pytest.fixture(scope="module")
def both_tagged(tmp_path_factory):
    return prepared(tmp_path_factory.mktemp("both"), lang_tag="both")


@pytest.mark.parametrize("placement", ["decoder_start", "both"])
def test_decoder_start_tag_is_fed_and_never_predicted(request, placement):
    """Under decoder_start, and under both (T-ENC + T-DEC: the source starts with the tag too), each
    target's first id is its tag, fed after the start token and left out of the loss."""
    cfg, data = request.getfixturevalue("decoder_started" if placement == "decoder_start" else "both_tagged")
    tok, split = data.tokenizers, data.train
    assert data.languages.placement == placement and split.target_tag
    rows = np.arange(len(split))
    batch = collate(split, rows, max_positions=64)
    for row in rows:
        language = split.direction_names[split.directions[row]].split("-")[1]
        tag = tok.tgt.token_to_id(f">>{language}<<")
        text = split.tgt[row].tolist()[1:]
        src = split.src[row].tolist()
        assert split.tgt[row][0] == tag and tag not in text
        if placement == "both":  # the tag first in the source, with the target's id
            assert tok.src.token_to_id(f">>{language}<<") == tag and src[0] == tag and tag not in src[1:]
        else:
            assert src[0] != tag
        width = len(text) + 2
        assert batch.tgt_in[row, :width].tolist() == [BOS_ID, tag, *text]
        assert batch.tgt_out[row, :width].tolist() == [PAD_ID, *text, EOS_ID]  # the tag's position has no loss
    assert batch.tgt_tokens == int((batch.tgt_out != PAD_ID).sum())
    assert batch.tgt_positions.tolist() == torch.flatten(batch.tgt_out != PAD_ID).nonzero().squeeze(1).tolist()
    # An update split in two after running out of memory keeps every target's EOS.
    halves = split_batch(batch)
    for half in halves:
        for row, index in enumerate(half.indices):
            text = split.tgt[index].tolist()[1:]
            assert half.tgt_out[row, : len(text) + 2].tolist() == [PAD_ID, *text, EOS_ID]
    assert sum(h.tgt_tokens for h in halves) == batch.tgt_tokens
    if placement == "both":  # what translation asks of the run: the tag on both sides
        tags = language_tags(cfg.lang_tag, configured_directions(cfg), tok)
        fr = tok.tgt.token_to_id(">>fr<<")
        assert tags == data.languages
        assert (tags.source_ids([9, 10], "fr"), tags.target_prefix("fr")) == ([fr, 9, 10], [fr])


def test_tokenizer_learns_each_language_s_text_once(tmp_path):
    """Multi30k-style, one file per language: train.en serves en-de, en-fr and en-cs, and the joint
    vocabulary learns it once, beside de, fr and cs (three copies would weigh English three times)."""
    corpus = {lang: [sentence(lang, i) for i in range(30)] for lang in ("en", "de", "fr")}
    corpus["cs"] = [sentence("fr", i).replace("fr", "cs") for i in range(30, 60)]
    for lang, lines in corpus.items():
        for split in ("train", "val", "test_2016_flickr"):
            (tmp_path / f"{split}.{lang}").write_text("\n".join(lines if split == "train" else lines[:4]))
    cfg = DataConfig(
        kind="multi30k",
        dir=str(tmp_path),
        directions=["en-de", "en-fr", "en-cs"],
        vocab_size=300,
        cache_dir=str(tmp_path / "cache"),
    )
    data = prepare_data(cfg)
    tags = [">>cs<<", ">>de<<", ">>fr<<"]  # the target languages' only, sorted
    once = Tokenizers.train(corpus["en"], corpus["de"] + corpus["fr"] + corpus["cs"], "bpe", 300, True, tags)
    assert data.tokenizers.fingerprint() == once.fingerprint()
    thrice = Tokenizers.train(corpus["en"] * 3, corpus["de"] + corpus["fr"] + corpus["cs"], "bpe", 300, True, tags)
    assert thrice.fingerprint() != once.fingerprint()  # the test can tell the two apart
    assert len(data.train) == 90 and np.bincount(data.train.directions).tolist() == [30, 30, 30]


# ---- temperature sampling -------------------------------------------------------------------------


def expected_shares(counts: list[int], temperature: float) -> list[float]:
    """p_d = n_d^(1/T) / sum n^(1/T), in plain Python."""
    weights = [n ** (1 / temperature) for n in counts]
    return [w / sum(weights) for w in weights]


@pytest.mark.parametrize("temperature", [1.0, 2.0, 5.0, math.inf])
def test_epoch_gives_each_direction_its_temperature_share(temperature):
    counts = [1000, 100, 10]
    directions = np.repeat(np.arange(3), counts)
    expected = [1 / 3] * 3 if math.isinf(temperature) else expected_shares(counts, temperature)
    shares = direction_shares(counts, temperature)
    assert shares.tolist() == pytest.approx(expected, rel=1e-12)
    total = sum(counts)
    for epoch in range(5):
        rows = epoch_rows(directions, shares, np.random.default_rng([7, epoch]))
        drawn = np.bincount(directions[rows], minlength=3)
        assert len(rows) == total
        assert all(abs(drawn[d] - total * expected[d]) < 1 for d in range(3))  # largest remainder: within one row
        for d in range(3):
            own = rows[directions[rows] == d] - sum(counts[:d])
            copies = np.bincount(own, minlength=counts[d])
            assert copies.max() - copies.min() <= 1  # repeated evenly, subsampled without replacement
    if temperature == 1.0:
        assert np.bincount(directions[rows]).tolist() == counts


def test_subsampled_rows_are_uniform_over_epochs():
    """Which rows of a large direction an epoch keeps: each as often as the others, over many epochs
    (a chi-square statistic against its 99.9% quantile)."""
    counts = [200, 20]
    directions = np.repeat(np.arange(2), counts)
    shares = direction_shares(counts, 5.0)
    kept = np.zeros(200)
    epochs = 400
    for epoch in range(epochs):
        rows = epoch_rows(directions, shares, np.random.default_rng([3, epoch]))
        kept += np.bincount(rows[rows < 200], minlength=200)
    expected = kept.sum() / 200
    chi_square = float(((kept - expected) ** 2 / expected).sum())
    # 199 degrees of freedom: the 99.9% quantile is about 267 (Wilson-Hilferty).
    dof = 199
    quantile = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3
    assert chi_square < quantile


def test_epoch_counts_sum_and_round_by_largest_remainder():
    counts = epoch_counts(np.array([0.5, 0.25, 0.25]), 7)
    assert counts.sum() == 7 and sorted(counts.tolist()) == [2, 2, 3]


def test_training_stream_mixes_directions_and_resumes_exactly(prefixed):
    cfg, data = prefixed
    stream = EpochBatches(data.train, batch_tokens=64, seed=5, max_positions=64)
    per_direction = np.zeros(3)
    mixed = 0
    while stream.epoch == 1:
        position = stream.position
        batch = stream.next_update(1, 0, 1)[0]
        if stream.epoch == 1 or position == 0:
            per_direction += np.bincount(data.train.directions[batch.indices], minlength=3)
            mixed += len(set(data.train.directions[batch.indices])) > 1
    share = expected_shares(list(SIZES.values()), cfg.sampling_temperature)
    assert all(abs(per_direction[d] - sum(SIZES.values()) * share[d]) < 1 for d in range(3))
    assert mixed > 0  # batches hold several directions
    state = stream.state_dict()
    assert state["directions"] == list(SIZES) and state["sampling_temperature"] == cfg.sampling_temperature
    resumed = EpochBatches(data.train, batch_tokens=64, seed=5, max_positions=64)
    resumed.load_state_dict(state)
    for _ in range(3):
        a, b = stream.next_update(1, 0, 1)[0], resumed.next_update(1, 0, 1)[0]
        assert a.indices.tolist() == b.indices.tolist()


def test_a_resume_with_other_directions_is_refused(prefixed):
    cfg, data = prefixed
    state = EpochBatches(data.train, 64, 5, 64).state_dict()
    with pytest.raises(UserError, match=r"resume: data\.directions=\['en-de', 'en-fr', 'de-en'\] differs"):
        EpochBatches(data.train, 64, 5, 64).load_state_dict({**state, "directions": ["en-de", "en-fr"]})
    with pytest.raises(UserError, match=r"resume: data\.sampling_temperature=5\.0 differs"):
        EpochBatches(data.train, 64, 5, 64).load_state_dict({**state, "sampling_temperature": 1.0})
    saved = as_dict(cfg)
    check_same_directions(saved, cfg)  # the same: no error
    other = DataConfig(**{**saved, "directions": ["en-de", "en-fr"]})
    with pytest.raises(UserError, match=r"resume: data\.directions=\['en-de', 'en-fr'\] differs from the checkpoint"):
        check_same_directions(saved, other)
    with pytest.raises(UserError, match=r"resume: data\.lang_tag=decoder_start differs"):
        check_same_directions(saved, DataConfig(**{**saved, "lang_tag": "decoder_start"}))
    with pytest.raises(
        UserError, match=r"resume: data\.directions=\['en-de'\] differs from the checkpoint's data\.directions=None"
    ):
        check_same_directions(as_dict(DataConfig()), DataConfig(directions=["en-de"]))
    check_same_directions(as_dict(DataConfig()), DataConfig(sampling_temperature=2.0))  # one direction: unused


# ---- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"directions": ["english-de"]}, "data.directions='english-de': each entry is src-tgt"),
        ({"directions": ["en_de"]}, "data.directions='en_de': each entry is src-tgt"),
        ({"directions": ["EN-de"]}, "data.directions='EN-de'"),
        ({"directions": ["en-de-fr"]}, "data.directions='en-de-fr'"),
        ({"directions": ["en-en"]}, "data.directions='en-en': source and target language must differ"),
        ({"directions": ["en-xx"]}, "data.directions='en-xx': xx is not an ISO 639-1 or 639-3 language code"),
        ({"directions": ["qqq_Latn-en"]}, "data.directions='qqq_Latn-en': qqq is not an ISO 639-1 or 639-3"),
        ({"directions": ["en-de", "en-de"]}, "lists en-de more than once"),
        ({"lang_tag": "target"}, "data.lang_tag='target': must be one of source_prefix, decoder_start"),
        ({"sampling_temperature": 0.5}, "data.sampling_temperature=0.5: must be >= 1"),
        ({"sampling_temperature": float("nan")}, "data.sampling_temperature=nan"),
        ({"directions": ["en-de"], "streaming": True}, "data.streaming=True: reads one direction"),
        ({"directions": ["en-de"], "kind": "builtin"}, "data.kind='builtin': the built-in task has one direction"),
        # One direction's languages were not checked: an empty src_lang trained, and the model then
        # answered src_lang=en with "the model translates -None only".
        ({"src_lang": ""}, "data.src_lang='': must be a language code (en, de, zh_Hant)"),
        ({"tgt_lang": "en-US"}, "data.tgt_lang='en-US': must be a language code"),
        ({"tgt_lang": "de fr"}, "data.tgt_lang='de fr': must be a language code"),
        # `tgt_lang: no` in a YAML file: the text key held 'False', and the run trained "en-False"
        ({"tgt_lang": "False"}, "data.tgt_lang='False': a YAML boolean, not a language: a bare no, yes, on or off"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(settings, message):
    cfg = DataConfig(**{"kind": "multi30k", **settings})
    with pytest.raises(UserError) as caught:
        validate_directions(cfg)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_direction_without_files_names_the_direction_and_file(tmp_path):
    for lang in ("en", "de"):
        for split in ("train", "val", "test_2016_flickr"):
            (tmp_path / f"{split}.{lang}").write_text("a b\nc d\n")
    cfg = DataConfig(kind="multi30k", dir=str(tmp_path), directions=["en-de", "en-cs"], cache_dir=str(tmp_path / "c"))
    with pytest.raises(UserError, match=r"^data\.directions=en-cs: .*no train\.cs or train\.cs\.gz"):
        prepare_data(cfg)


def test_a_direction_with_empty_files_is_named(tmp_path):
    settings = multilingual_cfg(tmp_path)
    Path(settings.train_src.replace("{src}-{tgt}.{src}", "de-en.de")).write_text("")
    Path(settings.train_tgt.replace("{src}-{tgt}.{tgt}", "de-en.en")).write_text("")
    with pytest.raises(
        UserError,
        match=r"^data\.directions=de-en: the train split of data\.kind=parallel_files is empty: no pairs in .*train\.de-en\.de",
    ):
        prepare_data(settings)


def test_the_same_files_for_every_direction_are_refused(tmp_path):
    paths = write_corpus(tmp_path)
    concrete = {k: v.replace("{src}", "en").replace("{tgt}", "de") for k, v in paths.items()}
    cfg = DataConfig(kind="parallel_files", directions=["en-de", "en-fr"], cache_dir=str(tmp_path / "c"), **concrete)
    with pytest.raises(UserError, match=r"would read the same pairs for every direction; put \{src\} and \{tgt\}"):
        prepare_data(cfg)


def test_the_same_files_for_every_direction_are_refused_by_the_plan(tmp_path):
    """The run's corpus plan refuses them before it hashes a file: the cache build did, after the run had
    been planned, its files hashed and its directory locked."""
    paths = write_corpus(tmp_path)
    concrete = {k: v.replace("{src}", "en").replace("{tgt}", "de") for k, v in paths.items()}
    cfg = DataConfig(kind="parallel_files", directions=["en-de", "en-fr"], **concrete)
    with pytest.raises(UserError, match=r"would read the same pairs for every direction; put \{src\} and \{tgt\}"):
        plan_corpus(cfg)


def test_iso_639_codes_with_a_script_or_region_are_taken():
    validate_directions(DataConfig(kind="multi30k", directions=["eng-fra", "en-zh_Hant", "pt_BR-de", "en-cs"]))


def test_direction_config_fills_the_placeholders():
    cfg = DataConfig(kind="jsonl", train="all.jsonl", valid="dev.{src}{tgt}.jsonl", src_key="{src}", tgt_key="{tgt}")
    one = direction_config(cfg, Direction("en", "fr"))
    assert (one.train, one.valid, one.src_key, one.tgt_key) == ("all.jsonl", "dev.enfr.jsonl", "en", "fr")
    assert (one.src_lang, one.tgt_lang, one.directions) == ("en", "fr", None)


# ---- one direction: exactly as before ----------------------------------------------------------------


def main_cache_key(cfg: DataConfig, files: list[str]) -> str:
    """The cache key as the code before data.directions computed it (seq2seq/data/pipeline.py on main)."""
    settings = {k: v for k, v in as_dict(cfg).items() if k not in ("cache_dir", "stream_buffer_pairs")}
    new_keys = (
        "directions",
        "lang_tag",
        "sampling_temperature",
        "sentencepiece_type",
        "corpora",
        "clean",
        "prune_vocab",
    )
    for new in (*new_keys, "clean_settings"):
        del settings[new]
    key = {
        "version": CACHE_VERSION,
        "data": settings,
        "files": [[str(Path(f).resolve()), content_digest(Path(f))] for f in files],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


@pytest.mark.parametrize("directions", [None, []])
def test_one_direction_gives_today_s_examples_and_cache(tmp_path, directions):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("\n".join(texts("en", 40)))
    tgt.write_text("\n".join(texts("de", 40)))
    files = {"train_src": str(src), "train_tgt": str(tgt), "valid_src": str(src), "valid_tgt": str(tgt)}
    cfg = DataConfig(
        kind="parallel_files", directions=directions, vocab_size=300, cache_dir=str(tmp_path / "c"), **files
    )
    assert cache_key(cfg) == main_cache_key(cfg, list(files.values()))
    data = prepare_data(cfg)
    # Independently: today's tokenizer on today's text, encoded and filtered as keep_pair says.
    sources, targets = (list(side) for side in zip(*iter_parallel(src, tgt), strict=True))
    expected = Tokenizers.train(sources, targets, "bpe", 300, joint=True)
    assert data.tokenizers.fingerprint() == expected.fingerprint()
    pairs = zip(expected.encode_src(sources), expected.encode_tgt(targets), strict=True)
    kept = [(s, t) for s, t in pairs if keep_pair(len(s), len(t), cfg.max_tokens, cfg.max_length_ratio) is None]
    assert [(data.train.src[i].tolist(), data.train.tgt[i].tolist()) for i in range(len(data.train))] == kept
    assert data.languages is None and data.train.directions is None and not data.train.target_tag
    # ... and its batches are today's: no sampling, every pair once an epoch.
    stream = EpochBatches(data.train, 64, 1, 64)
    assert stream.shares is None and "directions" not in stream.state_dict()
    assert sorted(np.concatenate(stream._batches).tolist()) == list(range(len(kept)))


# ---- what translation, export and the server ask ------------------------------------------------


def test_language_tags_say_where_the_tag_goes(prefixed, decoder_started):
    for (cfg, data), placement in ((prefixed, "source_prefix"), (decoder_started, "decoder_start")):
        tags = language_tags(cfg.lang_tag, configured_directions(cfg), data.tokenizers)
        assert tags == data.languages
        assert ModelLanguages.of(as_dict(cfg), data.tokenizers).tags == tags  # a checkpoint's config["data"]
        side = data.tokenizers.src if placement == "source_prefix" else data.tokenizers.tgt
        fr = side.token_to_id(">>fr<<")
        assert tags.tag_id("fr") == fr and tags.tag("fr") == ">>fr<<"
        if placement == "source_prefix":
            assert (tags.source_ids([9, 10], "fr"), tags.target_prefix("fr")) == ([fr, 9, 10], [])
        else:
            assert (tags.source_ids([9, 10], "fr"), tags.target_prefix("fr")) == ([9, 10], [fr])
        assert tags.is_trained("de", "en") and not tags.is_trained("de", "fr")  # de-fr: zero-shot
        with pytest.raises(UserError, match=r"^tgt_lang=cs: the model writes de, en, fr \(its data\.directions: "):
            tags.tag_id("cs")
    assert language_tags(DataConfig().lang_tag, [], None) is None  # one direction: no tags
    assert ModelLanguages.of(as_dict(DataConfig()), None).tags is None


def test_hub_reads_each_direction_s_languages(tmp_path, monkeypatch):
    """The hub's rows hold every language; a direction picks its two (the network is not needed)."""
    from seq2seq.data import corpus

    def fake_hub(cfg):
        lines = {lang: texts(lang, 12) for lang in LANGUAGES}
        split = (lines[cfg.src_lang], lines[cfg.tgt_lang])
        assert cfg.hub_subset == f"{cfg.src_lang}-{cfg.tgt_lang}"
        return {"train": split, "valid": split}

    monkeypatch.setattr(corpus, "read_hub", fake_hub)
    cfg = DataConfig(
        kind="hub",
        hub_name="any",
        hub_subset="{src}-{tgt}",
        directions=["en-de", "fr-en"],
        vocab_size=300,
        cache_dir=str(tmp_path),
    )
    data = prepare_data(cfg)
    tok = data.tokenizers
    for row in range(len(data.train)):
        tgt_lang = ("de", "en")[data.train.directions[row]]
        assert data.train.src[row][0] == tok.src.token_to_id(f">>{tgt_lang}<<")
        assert {w[:2] for w in tok.decode_tgt([data.train.tgt[row].tolist()])[0].split()} == {tgt_lang}


def test_separate_vocabularies_each_get_the_tags(tmp_path):
    cfg = multilingual_cfg(tmp_path, joint_vocab=False, lang_tag="decoder_start")
    data = prepare_data(cfg)
    assert not data.tokenizers.joint
    for side in (data.tokenizers.src, data.tokenizers.tgt):
        assert [side.token_to_id(t) for t in TAGS] == [4, 5, 6]
    assert data.languages.ids == {"de": 4, "en": 5, "fr": 6}
