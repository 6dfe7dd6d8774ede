"""SentencePiece tokenizers trained on the training split (data.tokenizer=sentencepiece), written as
a Marian (OPUS-MT) model ships them, so that every format that expects SentencePiece takes them as
they are: Hugging Face's MarianTokenizer, CTranslate2's Marian converter, Argos Translate packages.

The files: `source.spm` and `target.spm` (the same model when the vocabulary is joint), `vocab.json`
numbering the pieces as the SentencePiece model does (</s> 0, <unk> 1, then its pieces) with <pad>
last, as OPUS-MT's do (CTranslate2's converter drops that last entry: Marian decodes without pad),
and `target_vocab.json` beside it when each side has its own. `SentencePieceTokenizers` then reads
them as it reads a pretrained Marian model's: nothing downstream tells the two apart.

Text is normalised first, as OPUS-MT's SentencePiece models normalise it (`NORMALIZATION`, exactly
which characters in docs/train.md): a translation reads, and its output is, the normalised text. Byte
fallback keeps the rest of the byte-level tokenizer's guarantee: a character the training split never
had, once normalised, becomes byte pieces and decodes back to itself, never <unk>.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from seq2seq.config import UserError
from seq2seq.data.directions import check_tags_free
from seq2seq.data.sentencepiece import (
    EOS,
    PAD,
    SOURCE_SPM,
    TARGET_SPM,
    TARGET_VOCAB,
    UNK,
    VOCAB,
    SentencePieceTokenizers,
    import_sentencepiece,
)

log = logging.getLogger(__name__)
# The most sentences SentencePiece reads (a uniform sample of a larger split): its trainer keeps them in memory.
MAX_TRAINING_SENTENCES = 2_000_000
# SentencePiece's default and OPUS-MT's, what Marian users expect: NFKC plus whitespace and control
# character rules, then runs of spaces made one and the ends trimmed. `identity` would keep text as it
# is, at the cost of vocabulary entries for the variants; the rule travels inside the .spm files, so
# every reader of them (transformers, CTranslate2's converter, Argos) normalises alike.
NORMALIZATION = "nmt_nfkc"
NORMALIZATION_NOTE = (
    "SentencePiece normalises text as OPUS-MT does (nmt_nfkc): NFKC (ﬁ -> fi, ① -> 1, NBSP -> space), "
    "control characters dropped, tab, CR, zero-width space and BOM to a space, runs of spaces made one, "
    "the ends trimmed; translations read and write the text so (docs/train.md, 'What happens to the data')"
)


def train_model(texts: Iterable[str], model_type: str, vocab_size: int) -> bytes:
    """A SentencePiece model (its serialized bytes) of `vocab_size` - 1 pieces: <pad> is added after."""
    sentencepiece = import_sentencepiece()
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=_nonempty(texts),
            model_writer=model,
            model_type=model_type,
            vocab_size=vocab_size - 1,
            # Marian's specials, in its order; no <s>: a Marian decoder starts from pad (a zero vector).
            eos_id=0,
            unk_id=1,
            bos_id=-1,
            pad_id=-1,
            eos_piece=EOS,
            unk_piece=UNK,
            byte_fallback=True,
            normalization_rule_name=NORMALIZATION,
            remove_extra_whitespaces=True,
            hard_vocab_limit=False,  # a small corpus gets the pieces it has, not an error
            input_sentence_size=MAX_TRAINING_SENTENCES,
            shuffle_input_sentence=True,
            minloglevel=2,
        )
    except RuntimeError as err:
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(
            f"data.tokenizer=sentencepiece, data.vocab_size={vocab_size}: SentencePiece could not train: {detail}"
        ) from err
    return model.getvalue()


def write_vocabulary(model: bytes, path: Path, tags: Sequence[str] = ()) -> None:
    """vocab.json: piece -> id as the SentencePiece model numbers them, then the language tags
    (data.directions; entries of the vocabulary the SentencePiece model never produces, as in OPUS-MT's
    multilingual models: MarianTokenizer reads a leading >>de<< as one), then <pad>."""
    processor = import_sentencepiece().SentencePieceProcessor(model_proto=model)
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    check_tags_free(pieces, tags, f"the SentencePiece model's pieces ({path.name})")
    vocab = {piece: i for i, piece in enumerate([*pieces, *tags, PAD])}
    path.write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")


def train_sentencepiece(
    src_texts: Iterable[str],
    tgt_texts: Iterable[str],
    model_type: str,
    vocab_size: int,
    joint: bool,
    directory: Path,
    tags: Sequence[str] = (),
) -> SentencePieceTokenizers:
    """Trains and writes the tokenizer files into `directory`; each iterable is read once. `tags`: the
    language tags of data.directions, in every vocabulary."""
    log.info(NORMALIZATION_NOTE)
    directory.mkdir(parents=True, exist_ok=True)
    if joint:
        shared = train_model(_chain(src_texts, tgt_texts), model_type, vocab_size)
        (directory / SOURCE_SPM).write_bytes(shared)
        (directory / TARGET_SPM).write_bytes(shared)
        write_vocabulary(shared, directory / VOCAB, tags)
    else:
        src, tgt = train_model(src_texts, model_type, vocab_size), train_model(tgt_texts, model_type, vocab_size)
        (directory / SOURCE_SPM).write_bytes(src)
        (directory / TARGET_SPM).write_bytes(tgt)
        write_vocabulary(src, directory / VOCAB, tags)
        write_vocabulary(tgt, directory / TARGET_VOCAB, tags)
    return SentencePieceTokenizers.load(directory)


def _nonempty(texts: Iterable[str]) -> Iterator[str]:
    return (text for text in texts if text)


def _chain(*lists: Iterable[str]) -> Iterator[Any]:
    for texts in lists:
        yield from texts
