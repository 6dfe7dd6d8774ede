"""Argos Translate packages (`seq2seq-export format=argos`): a `.argosmodel` file that
`argostranslate.package.install_from_path` installs, and so LibreTranslate and the Argos apps serve.

What Argos reads (argostranslate/package.py and translate.py): a zip holding one directory with
metadata.json (the language codes and names), model/ (a CTranslate2 model), sentencepiece.model (one
SentencePiece model that encodes the source and decodes the output: a joint vocabulary), minisbd/
(the sentence splitter Argos would otherwise download on first use: argos_splitter.py) and an
optional README.md. It passes the source pieces to CTranslate2 with no option that bans a token, so
the model is written without pad (CTranslate2's Marian converter does the same); CTranslate2 appends
</s> to the source, as the model's config.json asks.

A package is one language pair. Of a multilingual model it is one of its directions, chosen by
tgt_lang (and src_lang): Argos puts nothing before the source, but it gives CTranslate2 the package's
`target_prefix`, so a model that takes its tag as the decoder's first token (data.lang_tag=decoder_start)
gets it. Argos decodes that tag with the package's sentencepiece.model and strips its text, so the tags
are added to that model as user-defined pieces.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from seq2seq.artifacts.argos_splitter import folder_file, line_splitter
from seq2seq.artifacts.checkpoint import current_umask
from seq2seq.artifacts.path_kind import ARGOS_METADATA, ARGOS_SPM, ARGOS_SUFFIX, DECODING_FILE
from seq2seq.config import UserError
from seq2seq.data.directions import language_tag
from seq2seq.data.sentencepiece import SentencePieceTokenizers

SUFFIX = ARGOS_SUFFIX
ARGOS_VERSION = "1.9"  # the package layout this writes: Argos 1.9 and later read it


def install_directory(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `argostranslate.package.install_from_path` puts a package, by Argos's rule
    (argostranslate/settings.py; its settings.json may also name one): $ARGOS_PACKAGES_DIR, else
    packages/ in its data folder, $XDG_DATA_HOME/argos-translate (~/.local/share/argos-translate)."""
    if environ.get("ARGOS_PACKAGES_DIR"):
        return Path(environ["ARGOS_PACKAGES_DIR"])
    data = Path(environ["XDG_DATA_HOME"]) if environ.get("XDG_DATA_HOME") else Path.home() / ".local" / "share"
    return data / "argos-translate" / "packages"


def package_code(src_lang: str, tgt_lang: str) -> str:
    return f"translate-{src_lang}_{tgt_lang}"


def metadata(payload: dict[str, Any], src: str, tgt: str, target_prefix: str | None) -> dict[str, Any]:
    return {
        "package_version": f"1.{payload.get('step', 0)}",  # a later export of a longer run is newer
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "code": package_code(src, tgt),
        "from_code": src,
        "from_name": src,
        "to_code": tgt,
        "to_name": tgt,
        **({"target_prefix": target_prefix} if target_prefix else {}),
    }


def package_direction(
    payload: dict[str, Any], path: Path, src_lang: str | None, tgt_lang: str | None
) -> tuple[str, str, str | None]:
    """The package's (source, target, target_prefix): the run's pair, or the direction of a
    multilingual run that tgt_lang (and src_lang) choose, with its tag."""
    data = payload.get("config", {}).get("data", {})
    directions = list(data.get("directions") or [])
    if not directions:
        src, tgt = data.get("src_lang", "src"), data.get("tgt_lang", "tgt")
        for key, asked, recorded in (("src_lang", src_lang, src), ("tgt_lang", tgt_lang, tgt)):
            if asked is not None and asked != recorded:
                raise UserError(f"{path}: {key}={asked}, and this run translates {src} -> {tgt} only")
        return src, tgt, None
    if data.get("lang_tag") != "decoder_start":
        raise UserError(
            f"{path}: Argos puts nothing before the source, so this run's source tags (data.lang_tag="
            f"{data.get('lang_tag')}) cannot reach the model; train with data.lang_tag=decoder_start for "
            "Argos packages, or export format=ctranslate2 (seq2seq-translate tgt_lang=)"
        )
    listed = ", ".join(directions)
    if tgt_lang is None:
        raise UserError(
            f"{path}: an Argos package is one language pair; give tgt_lang= (and src_lang=) of one of "
            f"this run's directions: {listed}"
        )
    chosen = [d for d in directions if d.split("-")[1] == tgt_lang and src_lang in (None, d.split("-")[0])]
    if len(chosen) > 1:
        raise UserError(f"{path}: an Argos package is one of this run's directions ({listed}); give src_lang= too")
    if not chosen:
        asked = f"tgt_lang={tgt_lang}" + (f" src_lang={src_lang}" if src_lang else "")
        raise UserError(
            f"{path}: an Argos package is one of this run's directions ({listed}); {asked} is not one of them"
        )
    src, tgt = chosen[0].split("-")
    return src, tgt, language_tag(tgt)


def with_user_defined_pieces(model: bytes, pieces: list[str]) -> bytes:
    """A SentencePiece model with `pieces` added at its end as user-defined symbols (decoded as their
    own text): what the tags must be for Argos to strip them from the output."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    for text in pieces:
        piece = proto.pieces.add()
        piece.piece, piece.score, piece.type = text, 0.0, sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return proto.SerializeToString()


def readme(meta: dict[str, Any], payload: dict[str, Any]) -> str:
    data = payload.get("config", {}).get("data", {})
    return "\n".join(
        [
            f"# {meta['from_code']} -> {meta['to_code']}, trained with seq2seq",
            "",
            f"- updates: {payload.get('step', '?')}",
            f"- tokenizer: SentencePiece {data.get('sentencepiece_type', '')}, joint",
            "- install: `argostranslate.package.install_from_path(<this file>)`, or the Argos app's",
            "  Manage Packages > install from file; LibreTranslate serves what is installed",
            "",
        ]
    )


def argos_writer(
    payload: dict[str, Any],
    tokenizers: Any,
    path: Path,
    model_writer: Callable[[], Callable[[Path], None]],
    src_lang: str | None = None,
    tgt_lang: str | None = None,
) -> Callable[[Path, Path], None]:
    """Checks everything up front; the returned function writes the package file `output` as the file
    of its name in the folder `into` (replacing.new_output's, which then gives it its name).
    `model_writer` builds (and checks) the CTranslate2 model without pad and returns its writer."""
    src, tgt, target_prefix = package_direction(payload, path, src_lang, tgt_lang)
    if not isinstance(tokenizers, SentencePieceTokenizers):
        raise UserError(
            f"{path}: format=argos needs a SentencePiece tokenizer and this run's is byte-level; "
            "train with data.tokenizer=sentencepiece"
        )
    if not tokenizers.joint:
        raise UserError(
            f"{path}: format=argos takes one sentencepiece.model for both languages; train with data.joint_vocab=true"
        )
    write_model = model_writer()
    splitter = line_splitter(src)
    meta = metadata(payload, src, tgt, target_prefix)
    spm = tokenizers.src.spm_path.read_bytes()
    if target_prefix is not None:  # the vocabulary's tags (CTranslate2 and Argos match pieces by their text)
        spm = with_user_defined_pieces(spm, sorted(tokenizers.tgt.language_codes))
    folder = f"{meta['code']}-{meta['package_version'].replace('.', '_')}"

    def write(into: Path, output: Path) -> None:
        try:
            _write(into, output.name)
        except OSError as err:
            raise UserError(
                f"{output}: could not write the package ({err.strerror or err}); nothing was written"
            ) from err

    def _write(staging: Path, name: str) -> None:
        root = staging / folder
        (root / "model").mkdir(parents=True)
        write_model(root / "model")
        (root / "model" / DECODING_FILE).unlink(missing_ok=True)  # seq2seq's record: names this machine's paths
        (root / ARGOS_SPM).write_bytes(spm)
        (root / folder_file(src)).parent.mkdir()
        (root / folder_file(src)).write_bytes(splitter)  # Argos's splitter, without its download
        (root / ARGOS_METADATA).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        (root / "README.md").write_text(readme(meta, payload), encoding="utf-8")
        archive = staging / name
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for file in sorted(root.rglob("*")):
                zipped.write(file, file.relative_to(staging))
        os.chmod(archive, 0o666 & ~current_umask())

    return write
