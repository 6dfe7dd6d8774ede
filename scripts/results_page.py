"""Rewriting a generated table inside a page of the docs: what scripts/reproduce.py and
scripts/publish_distill.py do to docs/results.md, each between its own two marker comments."""

from __future__ import annotations

from pathlib import Path


def replace_table(page: Path | None, start: str, end: str, table: str) -> None:
    """Replaces what stands between the markers `start` and `end` of `page` with `table`; a page that
    is missing, or lacks either marker, is left as it is."""
    if page is None or not page.is_file():
        return
    text = page.read_text()
    if start in text and end in text:
        head, rest = text.split(start, 1)
        page.write_text(head + start + "\n" + table + rest[rest.index(end) :])
