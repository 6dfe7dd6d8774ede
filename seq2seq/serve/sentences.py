"""Sentences split before decoding and joined after: a model trained on sentences translates a
paragraph worse than its sentences one by one, and LibreTranslate splits them too.

sentencex (rules for some 300 languages, falling back along related languages, English's for a
code it does not know) splits; the whitespace between sentences is kept as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EDGES = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


@dataclass(frozen=True)
class Line:
    """One line as sentences: each sentence's text, and the whitespace around each."""

    spaces: list[str]  # before the first sentence, between sentences, after the last: len(sentences) + 1
    sentences: list[str]

    def join(self, translations: list[str], keep_edges: bool) -> str:
        if not self.sentences:
            return self.spaces[0] if keep_edges else ""
        text = self.spaces[0] if keep_edges else ""
        for index, translation in enumerate(translations):
            text += translation
            if index + 1 < len(translations) or keep_edges:
                text += self.spaces[index + 1]
        return text


def split_line(line: str, language: str) -> Line:
    """`line` (no newline) as its sentences, in `language`'s rules."""
    from sentencex import segment

    if not line.strip():
        return Line([line], [])
    spaces, sentences = [], []
    pending = ""  # whitespace after the previous sentence, up to this one
    for piece in segment(language, line):
        lead, text, trail = _EDGES.match(piece).groups()
        if not text:  # a piece of whitespace alone
            pending += piece
            continue
        spaces.append(pending + lead)
        sentences.append(text)
        pending = trail
    spaces.append(pending)
    return Line(spaces, sentences)
