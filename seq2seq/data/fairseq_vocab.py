"""The tokenizer of fairseq's multilingual models as Hugging Face ships them: NLLB-200 (`NllbTokenizer`),
M2M-100 (`M2M100Tokenizer`) and mBART-50 (`MBart50Tokenizer`). One SentencePiece model (`sentencepiece.bpe.model`) cuts text into
pieces for both sides; the ids are the model's own, read once from its Hugging Face tokenizer: fairseq's
dictionary (<s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces), then the language codes (`eng_Latn`,
`__en__`) and the other extra tokens, up to the model's vocabulary size.

It stands behind the interface of `Tokenizers`, as `seq2seq.data.sentencepiece` does for Marian's files:
our ids put pad, <s>, </s>, <unk> at 0-3 (the batching, the loss and the search rely on it) and the other
ids in the model's order after them; `order` maps our ids to the model's, and
`seq2seq.artifacts.m2m100` reorders the embedding rows with it. A run keeps the two files
(`sentencepiece.bpe.model`, `fairseq_vocab.json`: the model's tokens by id and its language codes), so
decoding it needs no transformers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config import UserError
from seq2seq.data.sentencepiece import (
    EOS,
    PAD,
    UNK,
    Encoding,
    PieceSides,
    PieceVocab,
    load_processor,
    read_vocabulary,
)

SPM_FILE, VOCAB_FILE = "sentencepiece.bpe.model", "fairseq_vocab.json"
BOS = "<s>"  # fairseq's; the project's name for it too (seq2seq.data.tokenizer)
# The files of the model's Hugging Face tokenizer, whichever it has: a run keeps them, so that its export
# carries them as they came (in TOKENIZER_DIR: tokenizer.json at a run's top is this project's tokenizer).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    SPM_FILE,
    "vocab.json",
    "added_tokens.json",
)
TOKENIZER_DIR = "huggingface_tokenizer"
# Hugging Face tokenizer class -> the family's name in fairseq_vocab.json.
FAMILIES = {
    "NllbTokenizer": "nllb",
    "NllbTokenizerFast": "nllb",
    "M2M100Tokenizer": "m2m100",
    "MBart50Tokenizer": "mbart50",
    "MBart50TokenizerFast": "mbart50",
}


def has_fairseq_files(directory: Path) -> bool:
    return (directory / SPM_FILE).is_file() and (directory / VOCAB_FILE).is_file()


def read_huggingface_vocab(directory: Path, vocab_size: int) -> dict[str, Any]:
    """fairseq_vocab.json's contents for the Hugging Face model in `directory`, from its own tokenizer:
    {"family", "tokens": the token of each of the model's `vocab_size` ids (None for rows no token
    names), "languages": language -> its code's token}. NLLB's languages are its codes (eng_Latn);
    M2M-100's are the ISO codes its `__en__` tokens spell."""
    import transformers  # the caller (artifacts.m2m100) has checked that it is installed

    if not (directory / SPM_FILE).is_file():
        raise UserError(f"{directory}: no {SPM_FILE}, the model's SentencePiece model (copy it from the model's files)")
    try:
        hf = transformers.AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, TypeError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise UserError(f"{directory}: its tokenizer could not be read: {first}") from err
    family = FAMILIES.get(type(hf).__name__)
    if family is None:
        raise UserError(
            f"{directory}: tokenizer {type(hf).__name__}; this tool reads NllbTokenizer, M2M100Tokenizer and "
            "MBart50Tokenizer (NLLB-200, M2M-100, mBART-50)"
        )
    vocab = hf.get_vocab()
    if family == "m2m100":  # its language tokens are not in get_vocab() (transformers 5)
        languages = {code: hf.get_lang_token(code) for code in hf.lang_code_to_id}
        vocab.update(hf.lang_token_to_id)
    else:
        listed = getattr(hf, "extra_special_tokens", None) or getattr(hf, "additional_special_tokens", [])
        languages = {str(code): str(code) for code in listed if str(code) in vocab}
    tokens: list[str | None] = [None] * max(vocab_size, max(vocab.values()) + 1)
    for token, index in vocab.items():
        tokens[index] = token
    for token in (BOS, PAD, EOS, UNK):
        if token not in vocab:
            raise UserError(f"{directory}: its tokenizer has no {token} token")
    return {"family": family, "tokens": tokens, "languages": languages}


# NLLB-200 names some languages by an ISO 639-3 individual language whose macrolanguage has the ISO 639-1
# code a LibreTranslate client sends (arb: Standard Arabic, of ar); pycountry knows no macrolanguages.
MACROLANGUAGE_MEMBERS = {
    "arb": "ar", "pes": "fa", "zsm": "ms", "lvs": "lv", "khk": "mn", "plt": "mg", "gaz": "om", "als": "sq",
    "swh": "sw", "uzn": "uz", "azj": "az", "npi": "ne", "ydd": "yi", "pbt": "ps", "quy": "qu", "ekk": "et",
}  # fmt: skip
# LibreTranslate's own code for Traditional Chinese (its zh is Simplified).
LIBRETRANSLATE_CODES = {"zt": "zho_Hant"}


def iso_639_1_languages(languages: dict[str, str]) -> dict[str, list[str]]:
    """ISO 639-1 code -> the model's languages it names, in sorted order (de: [deu_Latn]; zh: [zho_Hans,
    zho_Hant]), found through ISO 639-3 (deu is de) and MACROLANGUAGE_MEMBERS; mBART-50's en_XX is en's.
    A code the model names a language by already (M2M-100's en) is none of these."""
    import pycountry

    named: dict[str, list[str]] = {}
    for lang in sorted(languages):
        base = lang.partition("_")[0]
        iso = None
        if len(base) == 2 and base != lang:  # mBART-50's en_XX answers to en
            iso = base
        elif len(base) == 3:
            found = pycountry.languages.get(alpha_3=base)
            iso = getattr(found, "alpha_2", None) or MACROLANGUAGE_MEMBERS.get(base)
        if iso and iso not in languages:
            named.setdefault(iso, []).append(lang)
    return named


def iso_639_1_aliases(languages: dict[str, str]) -> dict[str, str]:
    """ISO 639-1 code -> the model's language named by it: deu_Latn for de. Where several of the model's
    languages have one code (zh: zho_Hans and zho_Hant; ks: kas_Arab and kas_Deva), the first in sorted
    order is its alias (zh -> zho_Hans); the others are asked for by their own names (or zt -> zho_Hant,
    as LibreTranslate spells it). A language named by a two-letter code already (M2M-100's) needs none."""
    aliases = {iso: langs[0] for iso, langs in iso_639_1_languages(languages).items()}
    aliases.update({code: lang for code, lang in LIBRETRANSLATE_CODES.items() if lang in languages})
    return aliases


def shared_iso_639_1_codes(languages: dict[str, str]) -> dict[str, list[str]]:
    """The ISO 639-1 codes that name more than one of the model's languages -> those languages (zh:
    [zho_Hans, zho_Hant]): their alias is the first; a translation that asks by the code is told which."""
    return {iso: langs for iso, langs in iso_639_1_languages(languages).items() if len(langs) > 1}


class FairseqVocab(PieceVocab):
    """Both sides' tokenizer: `sentencepiece.bpe.model` cuts, the model's tokens number (in our id
    layout)."""

    def __init__(
        self, spm_path: Path, vocab: dict[str, Any], vocab_path: Path | None, huggingface_files: Path | None
    ) -> None:
        """`huggingface_files`: the directory of the model's Hugging Face tokenizer files, where known."""
        self.spm_path, self.vocab_path, self.vocab = spm_path, vocab_path, vocab
        self.huggingface_files = huggingface_files
        self.processor = load_processor(spm_path)
        theirs: list[str | None] = vocab["tokens"]
        ids = {token: i for i, token in enumerate(theirs) if token is not None}
        specials = [ids[t] for t in (PAD, BOS, EOS, UNK)]
        # data.prune_vocab's record (seq2seq.data.vocab_pruning): the model's ids a run kept, and the model
        # they were kept from; None: every id of the model.
        self.pruned: dict[str, Any] | None = vocab.get("pruned")
        rows = self.pruned["ids"] if self.pruned is not None else range(len(theirs))
        self.order = specials + [i for i in rows if i not in specials]  # our id -> the model's
        self.pieces = [theirs[i] if theirs[i] is not None else f"<unnamed {i}>" for i in self.order]
        self.ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.unk_id = self.ids[UNK]
        self.family: str = vocab["family"]
        # language -> its code's token; a pruned vocabulary has the codes of the run's directions alone
        self.languages: dict[str, str] = {lang: code for lang, code in vocab["languages"].items() if code in self.ids}
        self.language_codes = set(self.languages.values())
        # Everything that is no SentencePiece piece (language codes, <mask>, unnamed rows): no text of its own.
        spm_pieces = {self.processor.id_to_piece(i) for i in range(self.processor.get_piece_size())}
        self.specials = {i for i, piece in enumerate(self.pieces) if piece not in spm_pieces} | {self.unk_id}

    def aliases(self) -> dict[str, str]:
        """The ISO 639-1 code of each language that has one -> the model's name for it (`iso_639_1_aliases`)."""
        return iso_639_1_aliases(self.languages)

    def shared_codes(self) -> dict[str, list[str]]:
        """The ISO 639-1 codes of several of the model's languages (`shared_iso_639_1_codes`)."""
        return shared_iso_639_1_codes(self.languages)

    def encode(self, text: str, add_special_tokens: bool = False) -> Encoding:
        """As the Hugging Face tokenizers cut a text: SentencePiece's pieces (one it cannot name is
        <unk>), each numbered by the model's vocabulary."""
        tokens = [self.processor.id_to_piece(i) for i in self.processor.encode(text)]
        return Encoding([self.ids.get(t, self.unk_id) for t in tokens], tokens)


@dataclass
class FairseqTokenizers(PieceSides):
    """NLLB-200's or M2M-100's tokenizer for both sides (one vocabulary: `joint`). The methods are
    those of `seq2seq.data.tokenizer.Tokenizers`."""

    src: FairseqVocab
    tgt: FairseqVocab
    joint: bool = True

    @classmethod
    def load(cls, directory: Path) -> FairseqTokenizers:
        """A run's files (fairseq_vocab.json beside sentencepiece.bpe.model)."""
        directory = Path(directory)
        if not has_fairseq_files(directory):
            raise FileNotFoundError(f"{directory}: no {SPM_FILE} and {VOCAB_FILE}")
        path, kept = directory / VOCAB_FILE, directory / TOKENIZER_DIR
        side = FairseqVocab(directory / SPM_FILE, read_vocabulary(path), path, kept if kept.is_dir() else None)
        return cls(side, side)

    @classmethod
    def of_huggingface(cls, directory: Path) -> FairseqTokenizers:
        """The tokenizer of the Hugging Face model in `directory` (`read_huggingface_vocab`), as many ids
        as its config.json's vocab_size."""
        try:
            vocab_size = int(json.loads((directory / "config.json").read_text(encoding="utf-8"))["vocab_size"])
        except (OSError, KeyError, TypeError, ValueError) as err:
            raise UserError(f"{directory / 'config.json'}: no readable vocab_size ({err})") from err
        side = FairseqVocab(directory / SPM_FILE, read_huggingface_vocab(directory, vocab_size), None, directory)
        return cls(side, side)

    def with_pruning(self, record: dict[str, Any] | None) -> FairseqTokenizers:
        """These tokenizers numbering only the model's ids that `record` keeps ({"ids", ...}:
        seq2seq.data.vocab_pruning), or, with None, every id of the model again (for the export)."""
        vocab = {key: value for key, value in self.src.vocab.items() if key != "pruned"}
        if record is not None:
            vocab["pruned"] = record
        side = FairseqVocab(self.src.spm_path, vocab, None, self.src.huggingface_files)
        return type(self)(side, side)

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        if self.src.spm_path.resolve() != (directory / SPM_FILE).resolve():
            shutil.copyfile(self.src.spm_path, directory / SPM_FILE)
        text = json.dumps(self.src.vocab, ensure_ascii=False)
        if not (directory / VOCAB_FILE).is_file() or (directory / VOCAB_FILE).read_text(encoding="utf-8") != text:
            (directory / VOCAB_FILE).write_text(text, encoding="utf-8")
        source, kept = self.src.huggingface_files, directory / TOKENIZER_DIR
        if source is not None and source.resolve() != kept.resolve():
            kept.mkdir(exist_ok=True)
            for name in TOKENIZER_FILES:
                if (source / name).is_file():
                    shutil.copyfile(source / name, kept / name)

    @staticmethod
    def files(directory: Path) -> list[Path]:
        return [directory / SPM_FILE, directory / VOCAB_FILE]

    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.src.processor.serialized_model_proto())
        digest.update(json.dumps(self.src.vocab, ensure_ascii=False, sort_keys=True).encode())
        return digest.hexdigest()
