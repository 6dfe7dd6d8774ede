"""Subword tokenizers from the `tokenizers` library, trained on the training split.

Byte-level pre-tokenization gives full coverage: any character, seen in training or not (emoji,
other scripts, control characters), becomes byte tokens and decodes back to itself, so nothing turns
into <unk> silently. Text is NFC-normalised first, which changes no character a reader would see.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from seq2seq.config import UserError
from seq2seq.data.fairseq_vocab import SPM_FILE, TOKENIZER_FILES, FairseqTokenizers, has_fairseq_files
from seq2seq.data.sentencepiece import SentencePieceTokenizers, has_sentencepiece_files

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3 in every vocabulary
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def decoder_start_id(decoder_start: str) -> int:
    """The id every target starts from (model.decoder_start): BOS, pad as in Marian models, or EOS as
    in M2M-100 and NLLB-200 (fairseq's models)."""
    return {"pad": PAD_ID, "eos": EOS_ID}.get(decoder_start, BOS_ID)


def banned_outputs(start_id: int) -> list[int]:
    """The ids a search never outputs: pad and the start token, or pad and BOS where the start is EOS
    (which ends a line)."""
    return [PAD_ID, BOS_ID if start_id == EOS_ID else start_id]


JOINT_FILE = "tokenizer.json"
SRC_FILE, TGT_FILE = "tokenizer.src.json", "tokenizer.tgt.json"


def train_tokenizer(texts: Iterable[str], kind: str, vocab_size: int, tags: Sequence[str] = ()) -> Tokenizer:
    """Learns a BPE or unigram vocabulary of `vocab_size` entries from `texts`. `tags`: language tags
    (>>de<<, data.directions), special tokens after the four of SPECIALS (ids 4, 5, ...). Like "<s>",
    a tag written in a sentence is text: only code that means a tag puts its id in (`_text_is_text`);
    and the byte-level pre-tokenizer cuts ">>", "de" and "<<" apart, so no learnt token spells one."""
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=UNK))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[*SPECIALS, *tags],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=[*SPECIALS, *tags],
            unk_token=UNK,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainer=trainer)
    _text_is_text(tokenizer)
    if [tokenizer.token_to_id(t) for t in SPECIALS] != [PAD_ID, BOS_ID, EOS_ID, UNK_ID]:
        raise RuntimeError("special tokens did not get ids 0-3")
    if [tokenizer.token_to_id(t) for t in tags] != list(range(len(SPECIALS), len(SPECIALS) + len(tags))):
        raise RuntimeError("language tags did not get the ids after the special tokens")
    return tokenizer


def _text_is_text(tokenizer: Tokenizer) -> Tokenizer:
    """A literal "<s>" or "<unk>" in a sentence is text, not a special token: encode it as bytes.
    The setting is not saved in tokenizer.json, so `Tokenizers.load` applies it again."""
    tokenizer.encode_special_tokens = True
    return tokenizer


@dataclass
class Tokenizers:
    """The source and target tokenizers of a run (the same object when the vocabulary is joint)."""

    src: Tokenizer
    tgt: Tokenizer
    joint: bool

    @classmethod
    def train(
        cls,
        src_texts: Iterable[str],
        tgt_texts: Iterable[str],
        kind: str,
        vocab_size: int,
        joint: bool,
        tags: Sequence[str] = (),
    ) -> Tokenizers:
        """Each iterable is read once, so they may be generators over a corpus on disk. `tags`: the
        language tags of data.directions, in both vocabularies when they are separate (same ids)."""
        if joint:
            shared = train_tokenizer(_chain(src_texts, tgt_texts), kind, vocab_size, tags)
            return cls(shared, shared, True)
        src = train_tokenizer(src_texts, kind, vocab_size, tags)
        return cls(src, train_tokenizer(tgt_texts, kind, vocab_size, tags), False)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.joint:
            self.src.save(str(directory / JOINT_FILE))
        else:
            self.src.save(str(directory / SRC_FILE))
            self.tgt.save(str(directory / TGT_FILE))

    @classmethod
    def load(cls, directory: Path) -> Tokenizers | SentencePieceTokenizers | FairseqTokenizers:
        """The tokenizer(s) saved in `directory`: ours, a Marian model's SentencePiece files, or an
        NLLB-200/M2M-100 model's (seq2seq.data.fairseq_vocab)."""
        if has_fairseq_files(directory):
            return FairseqTokenizers.load(directory)
        if (directory / SPM_FILE).is_file() and (directory / "config.json").is_file():  # as Hugging Face ships it
            return FairseqTokenizers.of_huggingface(directory)
        if has_sentencepiece_files(directory) and not (directory / JOINT_FILE).is_file():
            return SentencePieceTokenizers.load(directory)
        if (directory / JOINT_FILE).is_file():
            shared = _read(directory / JOINT_FILE)
            return cls(shared, shared, True)
        if (directory / SRC_FILE).is_file() and (directory / TGT_FILE).is_file():
            src = _read(directory / SRC_FILE)
            return cls(src, _read(directory / TGT_FILE), False)
        raise FileNotFoundError(f"{directory}: no {JOINT_FILE} (or {SRC_FILE} + {TGT_FILE})")

    @staticmethod
    def files(directory: Path) -> list[Path]:
        if has_fairseq_files(directory):
            return FairseqTokenizers.files(directory)
        if has_sentencepiece_files(directory) and not (directory / JOINT_FILE).is_file():
            return SentencePieceTokenizers.files(directory)
        names = [JOINT_FILE] if (directory / JOINT_FILE).is_file() else [SRC_FILE, TGT_FILE]
        return [directory / n for n in names]

    def fingerprint(self) -> str:
        """Identity of the source and target tokenizers, recorded in checkpoints so that a checkpoint
        is never decoded with another run's tokenizer of the same size (see tokenizer_fingerprint)."""
        return hashlib.sha256((tokenizer_fingerprint(self.src) + tokenizer_fingerprint(self.tgt)).encode()).hexdigest()

    def encode_src(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.src.encode_batch(texts, add_special_tokens=False)]

    def encode_tgt(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tgt.encode_batch(texts, add_special_tokens=False)]

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        return self.tgt.decode_batch(ids, skip_special_tokens=True)

    def src_tokens(self, text: str) -> list[str]:
        """Readable source pieces, for attention plot labels."""
        return [_readable(t) for t in self.src.encode(text, add_special_tokens=False).tokens]

    def tgt_tokens(self, ids: list[int]) -> list[str]:
        return [_readable(self.tgt.id_to_token(i) or "?") for i in ids]


def load_pretrained_tokenizers(directory: Path) -> SentencePieceTokenizers | FairseqTokenizers:
    """The tokenizer of the pretrained model (or of the run resumed) in `directory`: a run's saved files,
    a Marian model's, or an NLLB-200/M2M-100 model's as Hugging Face ships it."""
    if has_fairseq_files(directory):
        return FairseqTokenizers.load(directory)
    if has_sentencepiece_files(directory):
        return SentencePieceTokenizers.load(directory)
    return FairseqTokenizers.of_huggingface(directory)


def pretrained_tokenizer_files(directory: Path) -> list[Path]:
    """The files `load_pretrained_tokenizers` reads (what a data cache's key is made of)."""
    if has_fairseq_files(directory):
        return FairseqTokenizers.files(directory)
    if has_sentencepiece_files(directory):
        return SentencePieceTokenizers.files(directory)
    return [directory / name for name in (*TOKENIZER_FILES, "config.json") if (directory / name).is_file()]


def is_pretrained_tokenizer_directory(directory: Path) -> bool:
    """Whether `directory` holds a pretrained model's tokenizer (a resumed run's, say) rather than one trained here."""
    return has_fairseq_files(directory) or has_sentencepiece_files(directory) or (directory / SPM_FILE).is_file()


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A hash of what maps text to ids and back: the model type, its tokens by id and its BPE merges.
    Not of the whole JSON: a Unigram model's scores change in their last digit when saved and read
    back, so the JSON of a trained tokenizer and of its saved file differ."""
    model = json.loads(tokenizer.to_str())["model"]
    tokens = [tokenizer.id_to_token(i) for i in range(tokenizer.get_vocab_size())]
    described = {"type": model.get("type"), "tokens": tokens, "merges": model.get("merges")}
    return hashlib.sha256(json.dumps(described, ensure_ascii=False).encode()).hexdigest()


def _read(path: Path) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the library raises a bare Exception for an unparsable file
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{path}: not a readable tokenizer file (truncated or corrupt): {detail}") from err
    return _text_is_text(tokenizer)


def _readable(piece: str) -> str:
    """Byte-level pieces spell every byte as a printable stand-in ('Ġ' for a space, 'Ã¼' for 'ü');
    decode them back, marking spaces as '▁' so word starts stay visible in labels."""
    return _BYTE_DECODER.decode([piece]).replace(" ", "▁")


_BYTE_DECODER = decoders.ByteLevel()


def _chain(*lists: Iterable[str]) -> Iterator[str]:
    for texts in lists:
        yield from texts
