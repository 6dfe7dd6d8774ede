"""`format: "html"`: a document's text translated, its markup kept. BeautifulSoup (with Python's
own html.parser) finds the text nodes; each is translated and put back in its place, so tags,
attributes, comments and entities stay as they were.

Text that is not prose for a reader is left alone: scripts, styles, code, and elements marked
`translate="no"` (HTML's own attribute for it). Runs of whitespace inside a node are one space to the
model (a browser shows them so); the whitespace at a node's edges is kept.
"""

from __future__ import annotations

import re

from bs4 import BeautifulSoup, NavigableString
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction
from bs4.formatter import HTMLFormatter

UNTRANSLATED_TAGS = frozenset({"script", "style", "code", "pre", "kbd", "samp", "template", "textarea"})
_NOT_TEXT = (Comment, Declaration, Doctype, ProcessingInstruction)
_SPACES = re.compile(r"\s+")
_EDGES = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


class HtmlDocument:
    """A parsed document: `texts` to translate, `render(translations)` the document with them."""

    def __init__(self, html: str) -> None:
        self._soup = BeautifulSoup(html, "html.parser")
        self._nodes: list[tuple[NavigableString, str, str]] = []  # node, leading and trailing whitespace
        self.texts: list[str] = []
        for node in self._soup.find_all(string=True):
            if isinstance(node, _NOT_TEXT) or not node.strip() or _left_alone(node):
                continue
            lead, text, trail = _EDGES.match(str(node)).groups()
            self._nodes.append((node, lead, trail))
            self.texts.append(_SPACES.sub(" ", text))

    def render(self, translations: list[str]) -> str:
        for (node, lead, trail), translation in zip(self._nodes, translations, strict=True):
            node.replace_with(NavigableString(lead + translation + trail))
        return self._soup.decode(formatter=_AS_WRITTEN)


class _AsWritten(HTMLFormatter):
    """bs4's minimal HTML output, with attributes in the document's order (bs4 sorts them) and
    void elements as HTML writes them (`<br>`, not `<br/>`)."""

    def attributes(self, tag):  # noqa: ANN001, ANN201  (bs4's signature)
        return list(tag.attrs.items())


_AS_WRITTEN = _AsWritten(entity_substitution=HTMLFormatter.REGISTRY["minimal"].entity_substitution,
                         void_element_close_prefix="", empty_attributes_are_booleans=True)  # fmt: skip


def _left_alone(node: NavigableString) -> bool:
    for parent in node.parents:
        if parent.name in UNTRANSLATED_TAGS or str(parent.get("translate", "")).lower() == "no":
            return True
    return False
