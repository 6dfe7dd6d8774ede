"""The languages a server translates: their names for /languages, which source and target a request
asks for, and what `source: "auto"` and /detect make of a text.

Names come from ISO 639-1 (pycountry); a code that is not one (the built-in task's `src`) is its own
name. Detection is py3langid's, whose model ships in its wheel, restricted to the server's languages:
it can only answer a language the server has.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from seq2seq.serve.requests import BadRequest


@functools.cache
def name_of(code: str) -> str:
    """'English' for en: the name clients show in their language menus. Only two-letter ISO 639-1
    codes (LibreTranslate's) are looked up: the built-in task's `src` is also ISO 639-3's code of a
    Sardinian language, which its model does not translate."""
    import pycountry

    found = pycountry.languages.get(alpha_2=code.lower()) if len(code) == 2 else None
    return found.name if found is not None else code


class Languages:
    """One source and one target language (the model's pair)."""

    def __init__(self, source: str, target: str) -> None:
        self.source, self.target = source, target
        self._detector = Detector([source, target])

    def listing(self) -> list[dict[str, Any]]:
        """LibreTranslate's /languages: each language, its name and the targets it translates into."""
        return [
            {"code": self.source, "name": name_of(self.source), "targets": [self.target]},
            {"code": self.target, "name": name_of(self.target), "targets": []},
        ]

    def pair_of(self, body: dict[str, Any]) -> tuple[str, str]:
        """The (source, target) a request asks for; `source` may be "auto" (there is one source)."""
        asked_source, asked_target = body.get("source") or "auto", body.get("target") or self.target
        if asked_source not in (self.source, "auto"):
            raise BadRequest(f"source={asked_source!r}: this server translates {self.source} -> {self.target}")
        if asked_target != self.target:
            raise BadRequest(f"target={asked_target!r}: this server translates {self.source} -> {self.target}")
        return self.source, self.target

    def detect(self, text: str) -> list[dict[str, Any]]:
        return self._detector.rank(text)


class Detector:
    """py3langid over `codes` (those it knows); its model is loaded on first use (about a second)."""

    def __init__(self, codes: list[str]) -> None:
        self.codes = list(dict.fromkeys(codes))
        self._identifier: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._identifier is None:
                from py3langid.langid import MODEL_FILE, LanguageIdentifier

                identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
                known = [code for code in self.codes if code in identifier.nb_classes]
                if known:
                    identifier.set_languages(known)
                self._identifier = identifier if known else False
            return self._identifier

    def rank(self, text: str) -> list[dict[str, Any]]:
        """LibreTranslate's answer: candidates, best first, with a confidence in percent. Where the
        library knows none of the server's languages (or there is no text) the first language is
        answered with confidence 0, as LibreTranslate answers when it cannot tell."""
        identifier = self._load()
        if not identifier or not text.strip():
            return [{"confidence": 0.0, "language": self.codes[0]}]
        ranked = identifier.rank(text)
        return [{"confidence": round(100 * float(p), 1), "language": code} for code, p in ranked if p >= 0.0005]
