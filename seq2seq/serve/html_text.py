"""`format: "html"`: a document's text translated, everything else kept byte for byte. Python's own
`html.parser` (the parser LibreTranslate's translatehtml uses, through BeautifulSoup) finds the text
between the markup; each piece to translate is replaced in the document's own source, so tags,
attributes, comments, CDATA, entities and whatever is left alone come back exactly as they were sent
(a parse tree written out again changed them: an unclosed `<script>` lost its text, CDATA lost its
markers and was translated, `&nbsp;` in `<code>` became a raw character).

Left alone, as LibreTranslate leaves them: scripts, styles, code and the other elements of
NOT_TRANSLATED, and elements marked `translate="no"` (HTML's own attribute for it). `<pre>` is
translated, as there, line by line with its line breaks and indentation kept (LibreTranslate folds its
whitespace). Elsewhere runs of whitespace inside a text are one space to the model (a browser shows
them so); the whitespace at a text's edges is kept as written.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

# LibreTranslate's (translatehtml's NON_TRANSLATEABLE_TAGS), and elements whose text is a program's
# input or output, or a form's value, rather than prose.
NOT_TRANSLATED = frozenset(
    {"address", "applet", "audio", "canvas", "code", "embed", "script", "style", "time", "video"}
)
NOT_TRANSLATED |= {"kbd", "samp", "template", "textarea"}
# Elements with no end tag: never open, so never holding text.
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source"})
VOID |= {"track", "wbr"}
_HTML_SPACE = "[ \t\n\r\f]"  # HTML's whitespace: a no-break space is text, not layout
_EDGES = re.compile(rf"^({_HTML_SPACE}*)(.*?)({_HTML_SPACE}*)$", re.DOTALL)
_SPACES = re.compile(r"\s+")


class HtmlDocument:
    """A parsed document: `texts` to translate, `render(translations)` the document with them."""

    def __init__(self, source: str) -> None:
        self._source = source
        self._spans: list[tuple[int, int]] = []  # where each text to translate is in the source, its edges off
        self.texts: list[str] = []
        for start, end, preformatted in _Texts.of(source):
            lead, raw, trail = _EDGES.match(source[start:end]).groups()
            text = html.unescape(raw)
            # Outside <pre>, any run of spaces (a no-break one too) is one space to the model, as before.
            text = _lines(text) if preformatted else _SPACES.sub(" ", text).strip()
            if text.strip():  # `&nbsp;` alone is layout: kept, not translated into nothing
                self._spans.append((start + len(lead), end - len(trail)))
                self.texts.append(text)

    def render(self, translations: list[str]) -> str:
        out, done = [], 0
        for (start, end), translation in zip(self._spans, translations, strict=True):
            out += [self._source[done:start], html.escape(translation, quote=False)]
            done = end
        return "".join([*out, self._source[done:]])


def _lines(text: str) -> str:
    """A <pre>'s text as the model's lines: its line breaks kept, CR LF as LF (each line is translated
    with its indentation kept: the service keeps a line's edges)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


class _Texts(HTMLParser):
    """The text runs of a document, in order: (start, end, inside <pre>) for each one not left alone.
    Positions are the parser's own (line, column), turned into offsets in the source."""

    @classmethod
    def of(cls, source: str) -> list[tuple[int, int, bool]]:
        parser = cls(source)
        parser.feed(source)
        parser.close()  # an unclosed <script>'s text stays unparsed: it is left as it is
        parser._event()
        return parser.found

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)  # a text's entities arrive with it: one run, not three
        self._line_starts = [0] + [i + 1 for i, c in enumerate(source) if c == "\n"]
        self._open: list[tuple[str, bool, bool]] = []  # (tag, left alone, preformatted) of each open element
        self._text_start: int | None = None  # where the text run being read began
        self.found: list[tuple[int, int, bool]] = []

    def _offset(self) -> int:
        line, column = self.getpos()
        return self._line_starts[line - 1] + column

    def _event(self) -> None:
        """Markup (or the end) at the current position: the text run before it, if any, ends here."""
        if self._text_start is not None:
            alone, pre = (self._open[-1][1], self._open[-1][2]) if self._open else (False, False)
            if not alone:
                self.found.append((self._text_start, self._offset(), pre))
            self._text_start = None

    def handle_data(self, data: str) -> None:
        if self._text_start is None:  # "a < b" comes as three pieces: one run
            self._text_start = self._offset()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._event()
        if tag in VOID:
            return
        alone, pre = self._open[-1][1:] if self._open else (False, False)
        alone = alone or tag in NOT_TRANSLATED or any(k == "translate" and (v or "").lower() == "no" for k, v in attrs)
        self._open.append((tag, alone, pre or tag == "pre"))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._event()  # <br/>: nothing opens

    def handle_endtag(self, tag: str) -> None:
        self._event()
        names = [name for name, _, _ in self._open]
        if tag in names:  # an end tag closes what it ends and what is still open inside it
            del self._open[len(names) - 1 - names[::-1].index(tag) :]

    def handle_comment(self, data: str) -> None:
        self._event()

    def handle_decl(self, decl: str) -> None:
        self._event()

    def handle_pi(self, data: str) -> None:
        self._event()

    def unknown_decl(self, data: str) -> None:  # <![CDATA[...]]>: kept as written, never translated
        self._event()

    def parse_marked_section(self, i: int, report: int = 1) -> int:
        """`<![` not followed by a name ("<![<", "<![ x>") is a bogus comment to the next `>`, as a
        browser reads it; Python 3.11's parser raised AssertionError ("expected name token") and the
        request failed. Kept as written, like any comment."""
        position = self.getpos()
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            self.lineno, self.offset = position  # the failed scan moved it past the "<!["
            end = self.rawdata.find(">", i + 3)
            if end < 0:
                return -1  # not all here yet; at the end, close() keeps the rest as text
            self.handle_comment(self.rawdata[i + 3 : end])
            return end + 1
