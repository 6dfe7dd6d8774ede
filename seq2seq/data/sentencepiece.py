"""Pretrained SentencePiece tokenizers, as Marian (OPUS-MT) models ship them: `source.spm` and
`target.spm` cut text into pieces, and `vocab.json` (with `target_vocab.json` beside it when the
vocabularies are separate) numbers the pieces.

They stand behind the interface of `Tokenizers`, so the pipeline, training and translation use them
as they use a trained tokenizer. Ids follow this project's layout (pad, BOS, EOS, UNK at 0-3, which
the batching, the loss and the search rely on): the pretrained vocabulary is reordered with
pad -> 0, EOS -> 2, UNK -> 3, and the other pieces in their order in slots 1, 4, 5, ... Marian has
no BOS token, so slot 1 holds an ordinary piece: a model with these tokenizers starts its targets
from pad (model.decoder_start=pad) and never feeds or bans id 1. `order` maps our ids to the file's,
and `seq2seq.artifacts.marian` reorders the embedding rows with it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config import UserError

SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB = "source.spm", "target.spm", "vocab.json", "target_vocab.json"
SPIECE_UNDERLINE = "▁"
# Marian's special tokens; the names are this project's too (seq2seq.data.tokenizer, which imports this module).
PAD, EOS, UNK = "<pad>", "</s>", "<unk>"


def has_sentencepiece_files(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (SOURCE_SPM, TARGET_SPM, VOCAB))


def import_sentencepiece() -> Any:
    try:
        import sentencepiece
    except ImportError as err:
        raise UserError(
            "SentencePiece tokenizers (data.tokenizer=sentencepiece, Marian models) need the sentencepiece "
            "package: pip install sentencepiece"
        ) from err
    return sentencepiece


def load_processor(spm_path: Path) -> Any:
    """The SentencePiece model in `spm_path`; one that cannot be read is a one-line error naming it."""
    sentencepiece = import_sentencepiece()
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
    except (OSError, RuntimeError) as err:
        raise UserError(f"{spm_path}: not a readable SentencePiece model: {err}") from err


def read_vocabulary(path: Path) -> Any:
    """A vocabulary's JSON; one that cannot be read is a one-line error naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable vocabulary ({err})") from err


def marian_order(vocab: dict[str, int], path: Path) -> list[int]:
    """Our id -> the file's id: [pad, first ordinary piece, EOS, UNK, the other pieces in order]."""
    for token in (PAD, EOS, UNK):
        if token not in vocab:
            raise UserError(f"{path}: has no {token} token")
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise UserError(f"{path}: its ids are not 0..{len(ids) - 1}, one each")
    specials = {vocab[PAD], vocab[EOS], vocab[UNK]}
    ordinary = [i for i in ids if i not in specials]
    return [vocab[PAD], ordinary[0], vocab[EOS], vocab[UNK], *ordinary[1:]]


@dataclass
class Encoding:
    """What `tokenizers.Tokenizer.encode` returns, as far as this project reads it."""

    ids: list[int]
    tokens: list[str]


class PieceVocab:
    """What a SentencePiece side offers of `tokenizers.Tokenizer`, once its subclass has set `processor`
    (the SentencePiece model), `pieces` (our id -> piece), `ids` (piece -> our id) and `specials` (the ids
    decoding drops): Marian's (below) and fairseq's (seq2seq.data.fairseq_vocab). `encode` is each one's."""

    processor: Any
    pieces: list[str]
    ids: dict[str, int]
    specials: set[int]

    def get_vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_token(self, index: int) -> str | None:
        return self.pieces[index] if 0 <= index < len(self.pieces) else None

    def token_to_id(self, token: str) -> int | None:
        return self.ids.get(token)

    def to_str(self) -> str:
        """An identity for comparisons (an ensemble's members must share one tokenizer)."""
        return json.dumps([self.processor.serialized_model_proto().hex(), self.pieces])

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = False) -> list[Encoding]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        pieces = [self.pieces[i] for i in ids if not (skip_special_tokens and i in self.specials)]
        return self.processor.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()

    def decode_batch(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        return [self.decode(i, skip_special_tokens) for i in ids]


class SentencePieceVocab(PieceVocab):
    """One side: a SentencePiece model that cuts text into pieces and a vocabulary that numbers them
    (in our id layout)."""

    def __init__(self, spm_path: Path, vocab_path: Path) -> None:
        self.spm_path, self.vocab_path = spm_path, vocab_path
        self.processor = load_processor(spm_path)
        vocab = read_vocabulary(vocab_path)
        if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
            raise UserError(f"{vocab_path}: not a JSON object of piece -> id")
        self.order = marian_order(vocab, vocab_path)
        pieces = {i: piece for piece, i in vocab.items()}
        self.pieces = [pieces[i] for i in self.order]  # our id -> piece
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.unk_id = self.ids[UNK]
        # Multilingual models take a target language code such as >>de<< at the start of the source; in
        # a target (data.lang_tag=decoder_start) it is dropped on decoding, as the other special tokens.
        self.language_codes = {p for p in self.pieces if p.startswith(">>") and p.endswith("<<")}
        self.specials = {self.ids[PAD], self.ids[EOS], self.unk_id} | {self.ids[c] for c in self.language_codes}

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1 and text[: end + 2] in self.language_codes:
            code, text = [text[: end + 2]], text[end + 2 :]
        tokens = code + self.processor.encode(text, out_type=str)
        return Encoding([self.ids.get(t, self.unk_id) for t in tokens], tokens)


class PieceSides:
    """The methods of `seq2seq.data.tokenizer.Tokenizers` that read only the two sides, `src` and `tgt`
    (PieceVocab each): Marian's tokenizers (below) and fairseq's (seq2seq.data.fairseq_vocab)."""

    src: PieceVocab
    tgt: PieceVocab

    def encode_src(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.src.encode_batch(texts)]

    def encode_tgt(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tgt.encode_batch(texts)]

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        return self.tgt.decode_batch(ids)

    def src_tokens(self, text: str) -> list[str]:
        return self.src.encode(text).tokens

    def tgt_tokens(self, ids: list[int]) -> list[str]:
        return [self.tgt.id_to_token(i) or "?" for i in ids]


@dataclass
class SentencePieceTokenizers(PieceSides):
    """A Marian model's tokenizers (`source.spm`, `target.spm`, `vocab.json`), used as they come:
    nothing is trained. `joint` when one vocabulary numbers both sides (no target_vocab.json).
    The methods are those of `seq2seq.data.tokenizer.Tokenizers`."""

    src: SentencePieceVocab
    tgt: SentencePieceVocab
    joint: bool

    @classmethod
    def load(cls, directory: Path) -> SentencePieceTokenizers:
        directory = Path(directory)
        if not has_sentencepiece_files(directory):
            raise FileNotFoundError(f"{directory}: no {SOURCE_SPM}, {TARGET_SPM} and {VOCAB}")
        separate = (directory / TARGET_VOCAB).is_file()
        src = SentencePieceVocab(directory / SOURCE_SPM, directory / VOCAB)
        tgt = SentencePieceVocab(directory / TARGET_SPM, directory / (TARGET_VOCAB if separate else VOCAB))
        return cls(src, tgt, not separate)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for path in self.source_files():
            if path.resolve() != (directory / path.name).resolve():  # a resumed run saves into its own directory
                shutil.copyfile(path, directory / path.name)

    def source_files(self) -> list[Path]:
        files = [self.src.spm_path, self.tgt.spm_path, self.src.vocab_path]
        return files if self.joint else [*files, self.tgt.vocab_path]

    def fingerprint(self) -> str:
        """Identity of the tokenizers (their files' bytes), as `Tokenizers.fingerprint` gives it for
        this tool's own: recorded in checkpoints, checked before decoding."""
        digest = hashlib.sha256()
        for path in self.source_files():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()

    @staticmethod
    def files(directory: Path) -> list[Path]:
        names = [SOURCE_SPM, TARGET_SPM, VOCAB] + ([TARGET_VOCAB] if (directory / TARGET_VOCAB).is_file() else [])
        return [directory / n for n in names]
