"""Which language a translator writes: what a loaded model knows of languages (`ModelLanguages`), the
tgt_lang= and src_lang= a translation asks for checked against it, and the tag that asks for it.

Both engines ask this module, so both tag alike: under data.lang_tag=source_prefix the tag is the
source's first token, under decoder_start the first token forced after the decoder's start: given, not
predicted, so it counts in neither a hypothesis's score nor its length, in both engines
(seq2seq.inference.search.Hypothesis). A one-direction model has no tag: tgt_lang= (and
src_lang=) may name its own languages, so one script can pass them to every model, and anything else is
refused. No torch here: the CTranslate2 engine uses it too.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.config import DataConfig, UserError, parse_direction
from seq2seq.data.directions import LANGUAGE_CODES, LanguageTags, language_tags, parsed_directions

log = logging.getLogger("seq2seq.translate")
_LEADING_TAG = re.compile(r"\s*>>([^<>\s]+)<<\s*")  # data.directions.language_tag's spelling, and the space after
UNNAMED = (None, "src", "tgt")  # DataConfig's placeholders: a run that never named its languages


@dataclass(frozen=True)
class ModelLanguages:
    """`tags`: a multilingual model's (None for one direction); `src_lang`, `tgt_lang`: a one-direction
    model's data.src_lang and data.tgt_lang (None where the run did not name them)."""

    tags: LanguageTags | None
    src_lang: str | None = None
    tgt_lang: str | None = None

    @classmethod
    def of(cls, data: dict[str, Any] | None, tokenizers: Any) -> ModelLanguages:
        """From a checkpoint's (or export record's) config["data"] and the model's tokenizers."""
        if not data:
            return cls(None)
        lang_tag = data.get("lang_tag", DataConfig.__dataclass_fields__["lang_tag"].default)
        tags = language_tags(lang_tag, parsed_directions(data.get("directions")), tokenizers)
        if tags is not None:
            return cls(tags)
        named = lambda key: None if data.get(key) in UNNAMED else data[key]  # noqa: E731
        return cls(None, named("src_lang"), named("tgt_lang"))

    @property
    def directions(self) -> list[str]:
        """The directions the model was trained on, "src-tgt" (a one-direction model's where named)."""
        if self.tags is not None:
            return list(self.tags.directions)
        return [f"{self.src_lang}-{self.tgt_lang}"] if self.src_lang and self.tgt_lang else []

    def languages(self) -> set[str]:
        """Every language the model was trained to read or write (a pretrained model's own layout: every
        language it has, by its names and their ISO 639-1 aliases)."""
        if self.tags is not None and self.tags.placement == LANGUAGE_CODES:
            return set(self.tags.ids) | set(self.tags.aliases)
        return {lang for d in self.directions for lang in d.split("-")}

    def check(self, src_lang: str | None, tgt_lang: str | None) -> None:
        """A translation's languages against the model: an unknown one is an error naming its key; a
        direction a multilingual model was not trained on is translated zero-shot, with a warning."""
        if self.tags is None:
            for key, asked, own in (("src_lang", src_lang, self.src_lang), ("tgt_lang", tgt_lang, self.tgt_lang)):
                if asked is not None and own is not None and asked != own:
                    raise UserError(
                        f"{key}={asked}: the model translates {self.src_lang}-{self.tgt_lang} only (one direction, "
                        "trained without data.directions)"
                    )
            return
        if tgt_lang is not None:
            self.tags.tag_id(tgt_lang)  # the error that names the languages the model writes
        if src_lang is not None and self.tags.placement == LANGUAGE_CODES:
            self.tags.tag_id(src_lang, "src_lang")
        elif src_lang is not None and src_lang not in self.languages():
            raise UserError(
                f"src_lang={src_lang}: the model reads {', '.join(sorted(self.languages()))} (its data.directions: "
                f"{', '.join(self.tags.directions)})"
            )
        if src_lang is not None and tgt_lang is not None and not self.tags.is_trained(src_lang, tgt_lang):
            log.warning(
                "%s-%s is not one of the model's directions (%s): translating it zero-shot",
                src_lang,
                tgt_lang,
                ", ".join(self.tags.directions),
            )

    @property
    def counts_forced_tag(self) -> bool:
        """Whether the tag forced first counts in a hypothesis's length: a pretrained NLLB-200/M2M-100
        model's language code does, as transformers' `generate` (its forced_bos_token_id) counts it."""
        return self.tags is not None and self.tags.placement == LANGUAGE_CODES

    def required_target(self, tgt_lang: str | None) -> str | None:
        """tgt_lang, which a multilingual model needs: its absence is an error naming the key."""
        if self.tags is not None and tgt_lang is None:
            raise UserError(
                f"tgt_lang: the model is multilingual; name the language to write, one of "
                f"{', '.join(sorted(self.tags.ids))} (e.g. tgt_lang={sorted(self.tags.ids)[0]})"
            )
        return tgt_lang

    def untagged(self, line: str, tgt_lang: str | None, number: int) -> str:
        """A source line without a tag of the model's written at its start (">>fr<< A man.", as OPUS-MT's
        users write them): tgt_lang= chooses the language, and the engine puts its tag where the run
        put it. Left in, a SentencePiece tokenizer reads it as the tag itself, after tgt_lang's, and the
        model wrote French under tgt_lang=de. A tag of another language than tgt_lang's is warned of,
        naming the line; a tag elsewhere in the line, or of a language the model has no tag for, is text."""
        written, text = self.split_tag(line)
        if written is not None and written != tgt_lang:
            log.warning(
                "input line %d starts with the tag %s but tgt_lang=%s: translating into %s (the tag removed)",
                number,
                f">>{written}<<",
                tgt_lang,
                tgt_lang,
            )
        return text

    def split_tag(self, line: str) -> tuple[str | None, str]:
        """(the language of a tag of the model's that `line` starts with, or None; the line without it)."""
        found = _LEADING_TAG.match(line) if self.tags is not None else None
        if found is None or found.group(1) not in self.tags.ids:
            return None, line
        return found.group(1), line[found.end() :]

    def source_tag(self, tgt_lang: str | None, src_lang: str | None = None) -> list[int]:
        """The ids put before a source: the tag under source_prefix, the source language's code under
        language_codes."""
        if self.tags is None:
            return []
        return self.tags.source_ids([], self.required_target(tgt_lang), src_lang)

    def forced_tag(self, tgt_lang: str | None) -> list[int]:
        """The ids forced first in the output: the tag under decoder_start."""
        if self.tags is None:
            return []
        return self.tags.target_prefix(self.required_target(tgt_lang))

    def record(self) -> dict[str, Any]:
        """What an export records so that its engine tags as this model does (seq2seq.json's "data")."""
        if self.tags is None:
            return {"src_lang": self.src_lang or "src", "tgt_lang": self.tgt_lang or "tgt"}
        return {"directions": list(self.tags.directions), "lang_tag": self.tags.placement}


def translate_command(key: str, path: str | Path, data: Any) -> str:
    """The seq2seq-translate command line that translates with a model (`key`=`path`: run= or
    checkpoint=), as the training summary and seq2seq-export print it to be pasted into a shell. A
    multilingual model's has tgt_lang= (its first direction's target: without one the command fails)
    and, after a shell comment, the languages tgt_lang= may take. `data`: the model's data config (a
    DataConfig, its DictConfig, or a checkpoint's or export record's dict); None for one direction."""
    command = f"seq2seq-translate {key}={shlex.quote(str(path))}"
    listed = data.get("directions") if isinstance(data, Mapping) else getattr(data, "directions", None)
    directions = [parse_direction(entry) for entry in listed or []]
    if not directions:
        return f"{command} < input.txt > output.txt"
    languages = ", ".join(sorted({tgt for _, tgt in directions}))
    return f"{command} tgt_lang={directions[0][1]} < input.txt > output.txt  # tgt_lang= one of {languages}"
