"""Several translation directions in one model: which directions a run trains, each direction's
corpus settings, and the target-language tags that tell the model which language to write.

`data.directions` lists "src-tgt" codes. Without it a run has one direction (data.src_lang ->
data.tgt_lang) and no tags, exactly as before the key existed. With it, every target language gets a
tag, `>>de<<` (the OPUS-MT / Marian spelling, which MarianTokenizer, CTranslate2 and Argos take as it
is), a special token of the joint vocabulary that ordinary text never produces. Where it goes is
`data.lang_tag`: `source_prefix` (the source's first token, OPUS-MT) or `decoder_start` (the target's
first token after the decoder's start token, as mBART and NLLB place it; given, never predicted) or
`both` (the two at once, Wu et al. 2021's T-ENC + T-DEC: the encoder's output then carries the target
language too, which the zero-shot directions need when the decoder's one tag is outweighed by the source).

This module reads no corpus and imports no tokenizer library: it is what translation, export and the
server ask about a run's convention (`LanguageTags`), given its config and its tokenizers.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from seq2seq.config import DataConfig, UserError, as_dict, data_config, parse_direction

log = logging.getLogger(__name__)
SOURCE_PREFIX, DECODER_START, BOTH = "source_prefix", "decoder_start", "both"
# A pretrained NLLB-200 / M2M-100 model's layout: the source starts with its own language's code, the
# target (after the decoder's start, </s>) with the target language's; the codes are the model's tokens.
LANGUAGE_CODES = "language_codes"
SOURCE_TAGGED, TARGET_TAGGED = (SOURCE_PREFIX, BOTH), (DECODER_START, BOTH, LANGUAGE_CODES)
PLACEHOLDERS = ("{src}", "{tgt}")
# The keys a direction's files or fields are named by: {src} and {tgt} in them become its codes.
PATH_KEYS = {
    "parallel_files": ("train_src", "train_tgt", "valid_src", "valid_tgt", "test_src", "test_tgt"),
    "tsv": ("train", "valid", "test"),
    "jsonl": ("train", "valid", "test", "src_key", "tgt_key"),
    "hub": ("hub_subset",),
}


@dataclass(frozen=True)
class Direction:
    src: str
    tgt: str

    @property
    def name(self) -> str:
        return f"{self.src}-{self.tgt}"


def language_tag(lang: str) -> str:
    """The tag that asks for `lang` as the target: >>de<< (OPUS-MT's spelling)."""
    return f">>{lang}<<"


# The data config keys that say a model's languages and tag convention: what an export records, so
# that a model decoded without its checkpoint (weights, CTranslate2) tags as the checkpoint would.
LANGUAGE_KEYS = ("src_lang", "tgt_lang", "directions", "lang_tag")


def language_record(data: dict[str, Any]) -> dict[str, Any]:
    """LANGUAGE_KEYS of a checkpoint's config["data"], for an export's record."""
    return {key: _comparable(data[key]) if key == "directions" else data[key] for key in LANGUAGE_KEYS if key in data}


def configured_directions(data: Any) -> list[Direction]:
    """data.directions as Directions, in the order given; empty for a single-direction run."""
    return parsed_directions(data.directions)


def parsed_directions(entries: Iterable[str] | None) -> list[Direction]:
    """data.directions' entries ("src-tgt", as a config or a checkpoint's config["data"] holds them) as
    Directions, in the order given."""
    return [Direction(*parse_direction(entry)) for entry in (entries or [])]


def is_multilingual(data: Any) -> bool:
    """Whether the run tags its sentences: data.directions is set (even with one entry: a run that
    asks for tags gets them, so a model later given more directions keeps its convention)."""
    return bool(data.directions)


def target_languages(directions: Iterable[Direction]) -> list[str]:
    """The languages that get a tag, sorted: the same tags (and ids) whatever order directions are listed in."""
    return sorted({d.tgt for d in directions})


def tag_tokens(data: Any) -> list[str]:
    """The special tokens a multilingual run adds to its vocabulary (none for a single direction)."""
    return [language_tag(lang) for lang in target_languages(configured_directions(data))]


def direction_config(data: Any, direction: Direction) -> DataConfig:
    """`data` (a DataConfig, Hydra's data section or a plain dict) as a single-direction DataConfig for
    `direction`: see `direction_settings`."""
    if not isinstance(data, DataConfig):
        data = data_config(as_dict(data) if not isinstance(data, dict) else dict(data))
    return direction_settings(data, direction)


def direction_settings(data: DataConfig, direction: Direction) -> DataConfig:
    """A copy of `data` for `direction`: src_lang/tgt_lang are its codes and {src} and {tgt} in the file
    and field names of PATH_KEYS are replaced by them, so every reader of seq2seq.data.corpus reads one
    direction as it reads a bilingual corpus."""
    paths = {}
    for key in PATH_KEYS.get(data.kind, ()):
        if isinstance(value := getattr(data, key), str):
            paths[key] = value.replace("{src}", direction.src).replace("{tgt}", direction.tgt)
    # a deep copy: each direction's settings are its own, as the readers were always handed them
    return dataclasses.replace(
        copy.deepcopy(data), src_lang=direction.src, tgt_lang=direction.tgt, directions=None, **paths
    )


def each_direction(data: DataConfig) -> list[tuple[Direction, DataConfig]]:
    """Each direction the corpus has, with its single-direction data config (a run without
    data.directions: its one, named src_lang-tgt_lang)."""
    found = configured_directions(data)
    if not found:
        return [(Direction(data.src_lang, data.tgt_lang), data)]
    return [(d, direction_settings(data, d)) for d in found]


def check_readable_per_direction(data: Any) -> None:
    """With several directions, each must be read from its own files or fields: a key of PATH_KEYS
    without {src} or {tgt} would give every direction the same pairs. Multi30k and the hub name
    their files and fields by language already."""
    directions = configured_directions(data)
    keys = PATH_KEYS.get(data.kind, ())
    if len(directions) < 2 or data.kind not in ("parallel_files", "tsv", "jsonl"):
        return
    named = [k for k in keys if isinstance(getattr(data, k), str) and any(p in getattr(data, k) for p in PLACEHOLDERS)]
    if not named:
        shown = "data.train_src/train_tgt" if data.kind == "parallel_files" else "data.train"
        extra = (
            " or data.src_key/tgt_key (one JSON object per line with every language)" if data.kind == "jsonl" else ""
        )
        raise UserError(
            f"data.directions={list(data.directions)}: data.kind={data.kind} would read the same pairs for every "
            f"direction; put {{src}} and {{tgt}} in {shown}{extra}, e.g. train.{{src}}-{{tgt}}.{{src}}"
        )


@dataclass(frozen=True)
class LanguageTags:
    """A multilingual run's convention, rebuilt from its config and tokenizers (`language_tags`):
    what translation, exports and the server need to ask a model for a target language.

    `placement`: source_prefix | decoder_start | both. `ids`: target language -> its tag's id in the
    vocabulary the tag goes into (the source's for source_prefix, the target's for decoder_start; under
    both, the two vocabularies give each tag the same id).
    `directions`: the trained ones, "src-tgt"; any other pair whose target has a tag is zero-shot."""

    placement: str
    directions: tuple[str, ...]
    ids: dict[str, int]
    # language_codes: other names of the model's languages (the ISO 639-1 code a LibreTranslate client
    # sends, de -> deu_Latn), resolved before `ids` is read; see seq2seq.data.fairseq_vocab.
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)
    # language_codes: the run pruned the model's vocabulary to its directions (data.prune_vocab)
    pruned: bool = False
    # language_codes: the aliases that name several of the model's languages -> those (zh: zho_Hans,
    # zho_Hant); asking by one is answered by its alias, and said once (`tag_id`)
    shared: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def tag(self, tgt_lang: str) -> str:
        self.tag_id(tgt_lang)
        return language_tag(tgt_lang)

    def code(self, lang: str) -> str:
        """The model's own name of `lang` (itself, or what its alias names)."""
        return lang if lang in self.ids else self.aliases.get(lang, lang)

    def tag_id(self, tgt_lang: str, key: str = "tgt_lang") -> int:
        if self.code(tgt_lang) not in self.ids:
            trained = f" (its data.directions: {', '.join(self.directions)})" if self.directions else ""
            verb = "reads" if key == "src_lang" else "writes"
            if self.placement == LANGUAGE_CODES:  # a pretrained model's 100-200 languages: not all listed
                known = sorted(self.ids)
                if self.pruned:
                    raise UserError(
                        f"{key}={tgt_lang}: not one of the {len(known)} languages the run's pruned vocabulary kept "
                        f"(data.prune_vocab: its directions' codes): {', '.join(known)}; translating another needs a "
                        "run without data.prune_vocab"
                    )
                raise UserError(
                    f"{key}={tgt_lang}: not one of the model's {len(known)} languages: its codes ({', '.join(known[:4])}, "
                    f"...) or their ISO 639-1 codes ({', '.join(sorted(self.aliases)[:4]) or 'none'}, ...){trained}"
                )
            raise UserError(f"{key}={tgt_lang}: the model {verb} {', '.join(sorted(self.ids))}{trained}")
        if tgt_lang in self.shared and tgt_lang not in self.ids:
            self._say_which(tgt_lang, key)
        return self.ids[self.code(tgt_lang)]

    def _say_which(self, alias: str, key: str) -> None:
        """Once a process for each alias: which of the model's languages of that ISO 639-1 code it read."""
        said = (alias, self.code(alias), tuple(self.shared[alias]))
        if said in _SAID:
            return
        _SAID.add(said)
        others = [lang for lang in self.shared[alias] if lang != self.code(alias)]
        spelled = {lang: code for code, lang in self.aliases.items() if code != alias}  # zt for zho_Hant
        named = ", ".join(f"{lang} (or {spelled[lang]})" if lang in spelled else lang for lang in others)
        log.warning(
            "%s=%s: read as %s; ISO 639-1 %s names %d of the model's languages (%s), ask for %s by name",
            key, alias, self.code(alias), alias, len(self.shared[alias]), ", ".join(self.shared[alias]), named,
        )  # fmt: skip

    def is_trained(self, src_lang: str, tgt_lang: str) -> bool:
        """False: the pair would be translated zero-shot (warn once). A pretrained model's own layout
        with no directions of a run (loaded as it came) translates every pair of its languages."""
        if self.placement == LANGUAGE_CODES:
            trained = {"-".join(self.code(lang) for lang in d.split("-")) for d in self.directions}
            return not trained or f"{self.code(src_lang)}-{self.code(tgt_lang)}" in trained
        return f"{src_lang}-{tgt_lang}" in self.directions

    def client_directions(self, source: str | None = None, target: str | None = None) -> tuple[str, ...]:
        """The directions as a LibreTranslate client names them (what the server routes): under
        language_codes each language by its ISO 639-1 alias where it has one (eng_Latn-deu_Latn is
        en-de); a pretrained model with no directions of a run serves the one `source`-`target` names."""
        if self.placement != LANGUAGE_CODES:
            return self.directions
        names = list(self.directions)
        if not names:
            if not (source and target):
                raise UserError(
                    "source_lang, target_lang: a pretrained NLLB-200/M2M-100/mBART-50 model as it came serves the direction "
                    "they name (e.g. source_lang=en target_lang=de)"
                )
            self.tag_id(source, "source_lang")
            self.tag_id(target, "target_lang")
            names = [f"{source}-{target}"]
        iso: dict[str, str] = {}
        for alias, lang in sorted(self.aliases.items(), key=lambda item: len(item[0])):
            iso.setdefault(lang, alias)
        client = lambda lang: iso.get(self.code(lang), lang)  # noqa: E731
        return tuple(f"{client(src)}-{client(tgt)}" for src, _, tgt in (name.partition("-") for name in names))

    def source_ids(self, ids: list[int], tgt_lang: str, src_lang: str | None = None) -> list[int]:
        """A source's token ids as the model reads them: with the tag first under source_prefix and both,
        with the source language's code first under language_codes (src_lang= is then needed)."""
        if self.placement == LANGUAGE_CODES:
            if src_lang is None:
                raise UserError(
                    "src_lang: the model (NLLB-200/M2M-100/mBART-50 layout) starts each source with its language's code; "
                    f"name the source language, e.g. src_lang={sorted(self.ids)[0]}"
                )
            return [self.tag_id(src_lang, "src_lang"), *ids]
        return [self.tag_id(tgt_lang), *ids] if self.placement in SOURCE_TAGGED else list(ids)

    def target_prefix(self, tgt_lang: str) -> list[int]:
        """The ids forced after the decoder's start token (CTranslate2's target_prefix): the tag under
        decoder_start and both, nothing under source_prefix."""
        return [self.tag_id(tgt_lang)] if self.placement in TARGET_TAGGED else []

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def language_tags(lang_tag: str, directions: Sequence[Direction], tokenizers: Any) -> LanguageTags | None:
    """The tags of a run that places them by data.lang_tag `lang_tag` over its data.directions
    `directions` (`configured_directions`; empty for a single-direction run, which has none), with its
    tokenizers. Each tag must be one entry of the vocabulary it goes into: a tokenizer without one is
    not this run's (or predates data.directions)."""
    if lang_tag == LANGUAGE_CODES:
        return _language_codes(directions, tokenizers)
    if not directions:
        return None
    places = ((tokenizers.tgt, TARGET_TAGGED), (tokenizers.src, SOURCE_TAGGED))
    sides = [side for side, placements in places if lang_tag in placements]  # where the tag goes
    ids = {}
    for lang in target_languages(directions):
        found = {side.token_to_id(language_tag(lang)) for side in sides}
        if None in found:
            raise UserError(
                f"data.directions: the tokenizer has no {language_tag(lang)} token (trained without data.directions?)"
            )
        if len(found) > 1:  # both: one id for the tag on either side, as Tokenizers.train gives it
            raise UserError(
                f"data.lang_tag=both: {language_tag(lang)} has ids {sorted(found)} in the source and target "
                "vocabularies; it needs one (train the tokenizers with data.directions)"
            )
        ids[lang] = found.pop()
    return LanguageTags(lang_tag, tuple(d.name for d in directions), ids)


def _language_codes(directions: Sequence[Direction], tokenizers: Any) -> LanguageTags:
    """A pretrained model's own language codes (every language it has, by its tokenizer), the
    directions a run trained (none for the model as it came), and the aliases of its languages."""
    side = tokenizers.tgt
    if not hasattr(side, "languages"):
        raise UserError(
            "data.lang_tag=language_codes: the layout of a pretrained NLLB-200/M2M-100/mBART-50 model; it needs that model's "
            "tokenizer (init_from=<its directory>)"
        )
    ids = {lang: side.token_to_id(token) for lang, token in side.languages.items()}
    pruned = getattr(side, "pruned", None) is not None
    names = tuple(d.name for d in directions)
    tags = LanguageTags(LANGUAGE_CODES, names, ids, side.aliases(), pruned, side.shared_codes())
    for direction in directions:
        tags.tag_id(direction.src, "data.directions")
        tags.tag_id(direction.tgt, "data.directions")
    return tags


# The ambiguous aliases said already (`LanguageTags._say_which`): a server asks at every request.
_SAID: set[tuple[str, str, tuple[str, ...]]] = set()


def check_tags_free(pieces: Iterable[str], tags: Iterable[str], where: str) -> None:
    """A tag must be new to the vocabulary it joins: an ordinary piece with the same spelling would
    give text and tag one id (ordinary text could then ask for a language)."""
    taken = sorted(set(tags) & set(pieces))
    if taken:
        raise UserError(
            f"data.directions: the tag{'s' if len(taken) > 1 else ''} {', '.join(taken)} already "
            f"{'are' if len(taken) > 1 else 'is'} an entry of {where}"
        )


def check_same_directions(saved: Any, data: Any) -> None:
    """A resumed run must train the directions, tag placement and sampling it started with: its data
    position and its model's tags mean nothing under others. `saved`: the checkpoint's data config
    (a dict); `data`: the resumed run's. For train/command.py to call where it compares a resume's config;
    the batch stream checks the same against its saved state (seq2seq.data.batching)."""
    saved = saved if isinstance(saved, dict) else as_dict(saved)
    defaults = DataConfig()
    multilingual = bool(saved.get("directions")) or is_multilingual(data)
    for key in ("directions", "lang_tag", "sampling_temperature") if multilingual else ():
        before, now = _comparable(saved.get(key, getattr(defaults, key))), _comparable(getattr(data, key))
        if before != now:
            raise UserError(
                f"resume: data.{key}={now} differs from the checkpoint's data.{key}={before}; keep it, or start "
                "a new run with init_from=<checkpoint>"
            )


def _comparable(value: Any) -> Any:
    """A config value as compared across a resume: a list (or None for no list), else the value."""
    if value is None or isinstance(value, str | int | float):
        return value
    return list(value) or None
