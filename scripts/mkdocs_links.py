"""An mkdocs hook (mkdocs.yml `hooks:`): a link to a file that `exclude_docs` keeps out of the built site
is a dead link on the site, yet mkdocs 1.6 reports it at INFO whatever `validation:` says, so
`mkdocs build --strict` passed with one. Here it is a warning, which strict mode counts."""

from __future__ import annotations

import logging

EXCLUDED_LINK = "which is excluded from the built site"


class ExcludedLinkIsAWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and EXCLUDED_LINK in record.getMessage():
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def on_startup(command: str, dirty: bool) -> None:
    pages = logging.getLogger("mkdocs.structure.pages")  # the logger of mkdocs's link checks
    if not any(isinstance(f, ExcludedLinkIsAWarning) for f in pages.filters):  # `serve` rebuilds
        pages.addFilter(ExcludedLinkIsAWarning())
