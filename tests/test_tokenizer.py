"""Byte-level BPE and unigram tokenizers (`seq2seq.data.tokenizer`): every string round-trips to its
NFC form, nothing becomes <unk>, and vocabularies survive save/load."""

from __future__ import annotations

import random
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from seq2seq.config import UserError
from seq2seq.data.tokenizer import (
    JOINT_FILE,
    SPECIALS,
    SRC_FILE,
    TGT_FILE,
    UNK_ID,
    Tokenizers,
    train_tokenizer,
)

KINDS = ["bpe", "unigram"]
WORDS = {
    "en": "the a cat dog sits runs on under mat red big small house",
    "de": "der die das Hund Katze läuft schläft auf unter Matte groß klein Haus",
    "fr": "le la chat chien court dort sur sous tapis rouge grand petit maison",
    "ru": "кошка собака сидит бежит на под ковёр красный большой маленький дом",
}


def corpus(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = WORDS[rng.choice(sorted(WORDS))].split()
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(2, 9))))
    return lines


@pytest.fixture(scope="module", params=KINDS)
def tokenizer(request) -> Tokenizer:
    return train_tokenizer(corpus(1), request.param, 400)


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def round_trip(tok: Tokenizer, text: str) -> str:
    return tok.decode(encode(tok, text), skip_special_tokens=True)


HARD_TEXTS = {
    "emoji": "I ❤️ 🐈 and 🐕🦺!",
    "zwj_family": "family 👨‍👩‍👧‍👦 here",
    "skin_tone": "wave 👋🏽 bye",
    "flags": "flags 🇩🇪🇫🇷🇯🇵 🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "mixed_scripts": "Кошка sits на مرحبا بالعالم 机器翻译 नमस्ते दुनिया 한국어",
    "zero_width": "a\u200bb\u200dc\ufeffd\u200ce\u2060f",
    "controls": "col1\tcol2\x01\x02\x1b[0m\x7f end",
    "unseen": "ʕ•ᴥ•ʔ ∮ E⋅da = Q ∀x∈ℝ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 Ꭰ ᚠᛇᚻ",
    "spaces": "   leading and    multiple   spaces and trailing   ",
    "only_spaces": "     ",
    "nbsp_and_friends": "a\u00a0b\u2009c\u3000d",
    "combining_not_nfc": "Cafe\u0301 A\u030a n\u0303",  # NFC composes these
    "compatibility": "ﬁ ① ㎏ Ⅻ",  # NFC (unlike NFKC) keeps these
    "hangul_jamo": "\u1100\u1161\u11a8",  # NFC composes to one syllable
    "newline_like": "a\u2028b\u2029c\x85d\re",
    "nul": "a\x00b",
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(HARD_TEXTS))
def test_round_trip_is_nfc(tokenizer, name):
    text = HARD_TEXTS[name]
    assert round_trip(tokenizer, text) == unicodedata.normalize("NFC", text)
    assert UNK_ID not in encode(tokenizer, text)


def test_nfc_actually_changes_some_inputs():
    """So the round trips above compare against something other than the input itself."""
    for name in ("combining_not_nfc", "hangul_jamo"):
        assert unicodedata.normalize("NFC", HARD_TEXTS[name]) != HARD_TEXTS[name]
    assert unicodedata.normalize("NFC", HARD_TEXTS["compatibility"]) == HARD_TEXTS["compatibility"]


@pytest.mark.parametrize("text", ["<s>", "<unk>", "a </s> b", "<pad><pad>", "x<unk>y"])
def test_special_token_strings_in_text_are_text(tokenizer, text):
    ids = encode(tokenizer, text)
    assert not set(ids) & {0, 1, 2, 3}
    assert round_trip(tokenizer, text) == text


def test_training_text_round_trips_in_few_tokens(tokenizer):
    lines = corpus(1)[:50]
    for line in lines:
        assert round_trip(tokenizer, line) == line
    # The vocabulary learned something: fewer tokens than UTF-8 bytes.
    assert sum(len(encode(tokenizer, x)) for x in lines) < 0.75 * sum(len(x.encode()) for x in lines)


def test_vocab_size_and_specials(tokenizer):
    assert tokenizer.get_vocab_size() <= 400
    assert [tokenizer.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    assert [tokenizer.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]


def test_decode_skips_bos_and_eos(tokenizer):
    ids = encode(tokenizer, "the cat")
    assert tokenizer.decode([1, *ids, 2, 0, 0], skip_special_tokens=True) == "the cat"


text_without_newlines = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"))


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_property(kind):
    tok = train_tokenizer(corpus(2, n=200), kind, 320)

    @settings(max_examples=200, deadline=None, database=None)
    @given(text_without_newlines)
    def check(text: str) -> None:
        ids = encode(tok, text)
        assert UNK_ID not in ids
        assert tok.decode(ids, skip_special_tokens=True) == unicodedata.normalize("NFC", text)

    check()


# --- Tokenizers: joint or separate, save and load -----------------------------------------------


def _check_same_encoding(a: Tokenizer, b: Tokenizer, texts: list[str]) -> None:
    for text in texts:
        assert encode(a, text) == encode(b, text)
        assert round_trip(b, text) == unicodedata.normalize("NFC", text)


SAMPLES = [*corpus(9)[:20], *HARD_TEXTS.values(), "<s> literal <unk>"]


@pytest.mark.parametrize("kind", KINDS)
def test_joint_save_load(tmp_path, kind):
    src, tgt = corpus(3, 150), corpus(4, 150)
    toks = Tokenizers.train(src, tgt, kind, 350, joint=True)
    assert toks.joint and toks.src is toks.tgt
    toks.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [JOINT_FILE]
    assert Tokenizers.files(tmp_path) == [tmp_path / JOINT_FILE]
    loaded = Tokenizers.load(tmp_path)
    assert loaded.joint and loaded.src is loaded.tgt
    assert loaded.src.get_vocab() == toks.src.get_vocab()
    assert [loaded.src.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    _check_same_encoding(toks.src, loaded.src, SAMPLES)
    assert loaded.encode_src(SAMPLES) == toks.encode_tgt(SAMPLES)


@pytest.mark.parametrize("kind", KINDS)
def test_separate_save_load(tmp_path, kind):
    src = [line for line in corpus(5, 300) if any(c in line for c in "кошсбд")] or ["кошка"]
    tgt = corpus(6, 150)
    toks = Tokenizers.train(src, tgt, kind, 300, joint=False)
    assert not toks.joint and toks.src is not toks.tgt
    assert toks.src.get_vocab() != toks.tgt.get_vocab()
    toks.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [SRC_FILE, TGT_FILE]
    assert Tokenizers.files(tmp_path) == [tmp_path / SRC_FILE, tmp_path / TGT_FILE]
    loaded = Tokenizers.load(tmp_path)
    assert not loaded.joint
    assert loaded.src.get_vocab() == toks.src.get_vocab()
    assert loaded.tgt.get_vocab() == toks.tgt.get_vocab()
    for side in (loaded.src, loaded.tgt):
        assert [side.token_to_id(t) for t in SPECIALS] == [0, 1, 2, 3]
    _check_same_encoding(toks.src, loaded.src, SAMPLES)
    _check_same_encoding(toks.tgt, loaded.tgt, SAMPLES)
    assert loaded.decode_tgt(loaded.encode_tgt(SAMPLES)) == [unicodedata.normalize("NFC", s) for s in SAMPLES]


def test_load_from_empty_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}: no {JOINT_FILE}"):
        Tokenizers.load(tmp_path)


def test_load_with_only_one_side_fails(tmp_path):
    Tokenizers.train(["a b"], ["c d"], "bpe", 300, joint=False).save(tmp_path)
    (tmp_path / TGT_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=rf"{TGT_FILE}\)$"):
        Tokenizers.load(Path(tmp_path))


def test_readable_pieces():
    toks = Tokenizers.train(["the cat", "the dog"] * 20, ["die Katze"] * 20, "bpe", 300, joint=True)
    pieces = toks.src_tokens("the cat")
    assert "".join(pieces).replace("▁", " ") == "the cat"
    assert toks.tgt_tokens(toks.encode_tgt(["the cat"])[0]) == pieces


@pytest.mark.parametrize("content", [b"", b'{"version": "1.0", "trunc', b"\x00\xff garbage"])
def test_a_corrupt_tokenizer_file_is_a_user_error(tmp_path, content):
    (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(UserError, match=rf"^{re.escape(str(tmp_path / 'tokenizer.json'))}: not a readable tokenizer"):
        Tokenizers.load(tmp_path)
