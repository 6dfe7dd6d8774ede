"""The languages a server translates: their names for /languages, which model (or two, through a
common language) a request's source and target go to, and what `source: "auto"` and /detect make of
a text.

Names come from ISO 639-1 (pycountry); a code that is not one (the built-in task's `src`) is its own
name. Detection is py3langid's, whose model ships in its wheel, restricted to the server's languages
(seq2seq/data/language_id.py): it can only answer a language the server has.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any

from seq2seq.data import language_id
from seq2seq.serve.requests import BadRequest

log = logging.getLogger("seq2seq.serve")


@functools.cache
def name_of(code: str) -> str:
    """'English' for en: the name clients show in their language menus. Only two-letter ISO 639-1
    codes (LibreTranslate's) are looked up: the built-in task's `src` is also ISO 639-3's code of a
    Sardinian language, which its model does not translate."""
    import pycountry

    found = pycountry.languages.get(alpha_2=code.lower()) if len(code) == 2 else None
    return found.name if found is not None else code


@dataclass(frozen=True)
class Route:
    """Where a request goes: its source and target, the model or models (two through a pivot), and,
    for `source: "auto"`, what was detected (LibreTranslate's detectedLanguage)."""

    source: str
    target: str
    models: list[Model]
    detected: dict[str, Any] | None


@dataclass(frozen=True)
class Model:
    """One served model: its name (the run, as given), its pair, and whatever decodes it (a Batcher).
    A multilingual model is one Model per direction, all with its decoder: `tagged`, each asks for its
    target language (its requests' settings carry source and target as src_lang and tgt_lang)."""

    name: str
    source: str
    target: str
    decoder: Any
    tagged: bool = False

    def settings(self, settings: Any) -> Any:
        """A request's decoding settings for this model: a tagged one's with its direction."""
        return dataclasses.replace(settings, src_lang=self.source, tgt_lang=self.target) if self.tagged else settings


class Languages:
    """Every pair the models translate directly, and each pair two of them translate through a
    common language (a pivot) where no model does it directly."""

    def __init__(self, models: list[Model]) -> None:
        self.models = models
        self.routes: dict[tuple[str, str], list[Model]] = {}
        for model in models:  # the first model of a pair serves it; a later one's is never used: said once
            served = self.routes.setdefault((model.source, model.target), [model])[0]
            if served is not model:
                log.warning("%s -> %s: served by %s; %s's %s -> %s is not used (the first run= of a direction "
                            "serves it)", model.source, model.target, served.name, model.name, model.source,
                            model.target)  # fmt: skip
        if len({model.name for model in models}) > 1:  # several runs: which one answers each direction
            for (source, target), (model,) in self.routes.items():
                log.info("%s -> %s: %s", source, target, model.name)
        for first in models:
            for second in models:
                pair = (first.source, second.target)
                if first.target == second.source and pair[0] != pair[1] and pair not in self.routes:
                    self.routes[pair] = [first, second]
                    log.info("%s -> %s: through %s (%s, then %s)", *pair, first.target, first.name, second.name)
        self.codes = list(dict.fromkeys(code for model in models for code in (model.source, model.target)))
        self.detector = Detector(self.codes)

    def described(self) -> str:
        """The directions the models translate, each once (two runs may both translate en -> de)."""
        return ", ".join(f"{s} -> {t}" for s, t in dict.fromkeys((m.source, m.target) for m in self.models))

    def listing(self) -> list[dict[str, Any]]:
        """LibreTranslate's /languages: each language, its name and the targets it translates into."""
        return [
            {"code": code, "name": name_of(code), "targets": [t for s, t in self.routes if s == code]}
            for code in self.codes
        ]

    def route_of(self, body: dict[str, Any]) -> Route:
        """The source, target and models (one, or two through a pivot) a request asks for. `source`
        may be "auto": the one source that goes to the target, or the language detected among them.
        The errors begin with LibreTranslate's texts (clients show them, some match on them)."""
        source = _code(body, "source") or "auto"
        target = _code(body, "target") or (self.models[0].target if len(self.models) == 1 else None)
        if source != "auto" and source not in self.codes:
            raise BadRequest(f"{source} is not supported")
        if target is None:
            raise BadRequest(f"Invalid request: missing target parameter; this server translates {self.described()}")
        if target not in self.codes:
            raise BadRequest(f"{target} is not supported")
        sources = [s for s, t in self.routes if t == target]
        detected = None
        if source == "auto" and sources:  # one source for the target is that one; else the detected one
            detected = {"confidence": 100.0, "language": sources[0]}
            if len(sources) > 1:
                detected = self.detector.rank(_text_of(body), sources)[0]
            source = detected["language"]
        if (source, target) not in self.routes:
            whence = f" from {name_of(source)} ({source})" if source != "auto" else ""
            raise BadRequest(f"{name_of(target)} ({target}) is not available as a target language{whence}; "
                             f"this server translates {self.described()}")  # fmt: skip
        models = self.routes[(source, target)]
        if len(models) > 1:
            log.debug("%s -> %s through %s", source, target, models[0].target)
        return Route(source, target, models, detected)


def _code(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"Invalid request: {key} parameter must be a language code, not {type(value).__name__}")
    return value


def _text_of(body: dict[str, Any]) -> str:
    q = body.get("q", "")
    return "\n".join(q) if isinstance(q, list) else str(q)


class Detector:
    """py3langid over `codes` (those it knows); its model is loaded on first use (about a second)."""

    def __init__(self, codes: list[str]) -> None:
        self.codes = codes
        self._identifier: Any = None
        self._lock = threading.Lock()
        # Loaded beside the server's start, not in the first request that needs it.
        threading.Thread(target=self._load, name="seq2seq-serve-langid", daemon=True).start()

    def _load(self) -> Any:
        with self._lock:
            if self._identifier is None:
                self._identifier = language_id.identifier(self.codes) or False
            return self._identifier

    def rank(self, text: str, among: list[str] | None = None) -> list[dict[str, Any]]:
        """LibreTranslate's answer: candidates (of `among`, else all), best first, with a confidence
        in percent. Where the library knows none of them (or there is no text) the first is answered
        with confidence 0, as LibreTranslate answers when it cannot tell."""
        among = among or self.codes
        identifier = self._load()
        ranked = [(code, float(p)) for code, p in identifier.rank(text) if code in among] if identifier else []
        total = sum(p for _, p in ranked)
        if not text.strip() or total <= 0:
            return [{"confidence": 0.0, "language": among[0]}]
        return [
            {"confidence": round(100 * p / total, 1), "language": code} for code, p in ranked if p / total >= 0.0005
        ]
