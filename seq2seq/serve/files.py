"""/translate_file's formats: a file's texts out, the same file with their translations back in, in
its own format. One library per format: python-docx (.docx paragraphs, in the body and in tables),
srt (.srt subtitles, timings kept), BeautifulSoup (.html, as `format: "html"`), and plain lines (.txt,
their line ends kept).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from seq2seq.inference.translator_api import one_line
from seq2seq.serve.html_text import HtmlDocument
from seq2seq.serve.requests import BadRequest

FORMATS = (".txt", ".html", ".srt", ".docx")  # what /frontend/settings lists as supportedFilesFormat


@dataclass
class FileTexts:
    """A file's texts to translate (each may hold several lines), and how to write it back with theirs."""

    texts: list[str]
    render: Callable[[list[str]], bytes]


def read(name: str, data: bytes) -> FileTexts:
    suffix = PurePath(name).suffix.lower()
    readers = {".txt": _text, ".html": _html, ".htm": _html, ".srt": _srt, ".docx": _docx}
    if suffix not in readers:
        raise BadRequest(f"Invalid request: file format not supported; file {name!r}: the format "
                         f"{suffix or '(none)'} is not supported ({', '.join(FORMATS)})")  # fmt: skip
    if not data:
        raise BadRequest(f"Invalid request: empty file ({name!r})")
    return readers[suffix](name, data)


def _decoded(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise BadRequest(f"file {name!r} is not UTF-8 text (byte {err.start})") from err


def _text(name: str, data: bytes) -> FileTexts:
    lines = _decoded(name, data).splitlines(keepends=True)
    bodies = [line.rstrip("\r\n") for line in lines]
    ends = [line[len(body) :] for line, body in zip(lines, bodies, strict=True)]

    def render(translations: list[str]) -> bytes:
        return "".join(one_line(t) + end for t, end in zip(translations, ends, strict=True)).encode("utf-8")

    return FileTexts(bodies, render)


def _html(name: str, data: bytes) -> FileTexts:
    document = HtmlDocument(_decoded(name, data))
    return FileTexts(document.texts, lambda translations: document.render(translations).encode("utf-8"))


def _srt(name: str, data: bytes) -> FileTexts:
    import srt

    try:
        subtitles = list(srt.parse(_decoded(name, data)))
    except srt.SRTParseError as err:
        raise BadRequest(f"file {name!r} is not a SubRip file: {str(err).splitlines()[0]}") from err

    def render(translations: list[str]) -> bytes:
        for subtitle, translation in zip(subtitles, translations, strict=True):
            subtitle.content = translation
        return srt.compose(subtitles, reindex=False).encode("utf-8")

    return FileTexts([subtitle.content for subtitle in subtitles], render)


def _docx(name: str, data: bytes) -> FileTexts:
    import zipfile

    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, KeyError, ValueError) as err:
        raise BadRequest(f"file {name!r} is not a Word (.docx) document") from err
    paragraphs, seen = [], set()
    for paragraph in _paragraphs(document):  # a merged table cell is listed once per grid cell it spans
        if paragraph.text.strip() and id(paragraph._p) not in seen:
            seen.add(id(paragraph._p))
            paragraphs.append(paragraph)

    def render(translations: list[str]) -> bytes:
        for paragraph, translation in zip(paragraphs, translations, strict=True):
            # The translation goes into the first run that has text, with that run's formatting; a
            # translation has no word-for-word alignment to carry the other runs' formatting over.
            runs = [run for run in paragraph.runs if run.text]
            if not runs:  # text in hyperlinks or fields only: the paragraph's own text, plain
                paragraph.text = translation
                continue
            runs[0].text = translation
            for run in runs[1:]:
                run.text = ""
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return FileTexts([p.text for p in paragraphs], render)


def _paragraphs(document):  # noqa: ANN001, ANN202  (python-docx's types)
    """Every paragraph of the body, its tables (nested too), headers and footers."""
    yield from _block_paragraphs(document)
    for section in document.sections:
        for part in (section.header, section.footer):
            if not part.is_linked_to_previous:
                yield from _block_paragraphs(part)


def _block_paragraphs(block):  # noqa: ANN001, ANN202
    yield from block.paragraphs
    for table in block.tables:
        for row in table.rows:
            for cell in row.cells:
                yield from _block_paragraphs(cell)
