"""LibreTranslate's routes, with its shapes and status codes (its libretranslate/app.py): /translate,
/detect, /languages, /frontend/settings, /translate_file and /download_file, /spec.

Parameters come from the query string, a form or JSON alike; keys LibreTranslate's clients send that
this server has no use for (`secret`, ...) are ignored, as LibreTranslate ignores them.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from seq2seq.inference.settings import DecodingSettings
from seq2seq.serve import files
from seq2seq.serve.html_text import HtmlDocument
from seq2seq.serve.languages import Languages, Route, name_of
from seq2seq.serve.requests import (
    BadRequest,
    alternatives_of,
    check_format,
    check_limits,
    lines_of,
    texts_of,
    unique_alternatives,
)
from seq2seq.serve.service import Service

log = logging.getLogger("seq2seq.serve")
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: how long its page waits after typing to translate
KEPT_FILES = 100  # translated files kept for download; the oldest goes when another comes
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def check_html_size(documents: list[str], max_bytes: int) -> None:
    size = sum(len(document) for document in documents)
    if size > max_bytes:
        raise BadRequest(f"Invalid request: request ({size}) exceeds text limit ({max_bytes}); 'q' has {size} "
                         f"characters of HTML, more than max_file_bytes={max_bytes}", 413)  # fmt: skip


class LibreTranslate:
    def __init__(
        self, service: Service, languages: Languages, defaults: DecodingSettings, files_dir: Path, max_file_bytes: int
    ) -> None:
        self.service, self.languages, self.defaults = service, languages, defaults
        self.files_dir, self.max_file_bytes = files_dir, max_file_bytes
        self._files: OrderedDict[str, Path] = OrderedDict()  # download name -> the file this server wrote

    async def translate(self, request: Request) -> Response:
        service = self.service
        body = await service.params(request, None)
        texts, listed = texts_of(body, "q")  # in LibreTranslate's order: q, alternatives, limits, languages
        alternatives = alternatives_of(body, service.limits)
        fmt = check_format(body)
        if fmt == "text":  # an HTML document's limits are its text's (markup is not decoded)
            check_limits(texts, "q", listed, service.limits)
        else:  # the markup is parsed whole: bounded as a file is
            check_html_size(texts, self.max_file_bytes)
        route = self.languages.route_of(body)
        settings = self.defaults
        if alternatives and fmt == "text":  # n-best: the beam must hold them (none for HTML, as there)
            beam = max(self.defaults.beam, alternatives + 1)
            settings = dataclasses.replace(self.defaults, beam=beam, nbest=alternatives + 1)
        if fmt == "html":
            translated = await self._html(request, texts, route, listed)
            others: list[list[str]] = [[] for _ in texts]
        else:
            per_text = await service.translate_texts(request, texts, settings, route)
            translated = [hypotheses[0] for hypotheses in per_text]
            others = [unique_alternatives(hypotheses[1:], hypotheses[0]) for hypotheses in per_text]
        answer: dict[str, Any] = {"translatedText": translated if listed else translated[0]}
        if alternatives:
            answer["alternatives"] = others if listed else others[0]
        if route.detected is not None:
            answer["detectedLanguage"] = [route.detected] * len(texts) if listed else route.detected
        return JSONResponse(answer)

    async def _html(self, request: Request, htmls: list[str], route: Route, listed: bool) -> list[str]:
        """The documents' text nodes, decoded in one job, put back in their places."""
        documents = [HtmlDocument(html) for html in htmls]
        nodes = [text for document in documents for text in document.texts]
        check_limits(nodes, "q's text", listed, self.service.limits)
        per_text = await self.service.translate_texts(request, nodes, self.defaults, route, True)
        translated, start = [], 0
        for document in documents:
            part = per_text[start : start + len(document.texts)]
            start += len(document.texts)
            translated.append(document.render([hypotheses[0] for hypotheses in part]))
        return translated

    async def detect(self, request: Request) -> Response:
        body = await self.service.params(request, None)
        texts, _ = lines_of(body, "q", self.service.limits)
        return JSONResponse(self.languages.detector.rank("\n".join(texts)))

    async def languages_list(self, request: Request) -> Response:
        return JSONResponse(self.languages.listing())

    async def frontend_settings(self, request: Request) -> Response:
        source, target = self.languages.models[0].source, self.languages.models[0].target
        keyed = self.service.keys is not None
        return JSONResponse({
            "charLimit": self.service.limits.max_line_chars,
            "frontendTimeout": FRONTEND_TIMEOUT_MS,
            "apiKeys": keyed,
            "keyRequired": keyed,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(files.FORMATS),
            "language": {
                "source": {"code": source, "name": name_of(source)},
                "target": {"code": target, "name": name_of(target)},
            },
        })  # fmt: skip

    async def translate_file(self, request: Request) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "multipart/form-data":
            raise BadRequest("Invalid request: missing file parameter; send it as multipart/form-data")
        form = await request.form()
        params = {key: value for key, value in form.multi_items() if isinstance(value, str)}
        params |= {key: value for key, value in request.query_params.items() if key not in params}
        self.service.check_key(params)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise BadRequest("Invalid request: missing file parameter; the file to translate, as a multipart upload")
        data = await upload.read(self.max_file_bytes + 1)
        if len(data) > self.max_file_bytes:
            raise BadRequest(f"the file has more than max_file_bytes={self.max_file_bytes} bytes", 413)
        name = Path(upload.filename or "file.txt").name
        document = files.read(name, data)
        route = self.languages.route_of({**params, "q": document.texts[:100]})  # source=auto: from its text
        translated = await self._file_texts(request, document.texts, route)
        download = f"{uuid.uuid4().hex}.{_SAFE_NAME.sub('_', name)}"
        path = self.files_dir / download
        path.write_bytes(document.render(translated))
        self._keep(download, path)
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", filename=download))})

    async def _file_texts(self, request: Request, texts: list[str], route: Route) -> list[str]:
        """A file's texts, decoded max_request_lines lines at a time, so that the clients whose requests
        come meanwhile are decoded between its parts, not after the whole file."""
        limits = self.service.limits
        for index, text in enumerate(texts):
            for line in text.split("\n"):
                if len(line) > limits.max_line_chars:
                    raise BadRequest(f"Invalid request: request ({len(line)}) exceeds text limit "
                                     f"({limits.max_line_chars}); text {index + 1} of the file has a line of "
                                     f"{len(line)} characters, more than max_line_chars={limits.max_line_chars}",
                                     413)  # fmt: skip
        out: list[str] = []
        step = limits.max_request_lines
        for start in range(0, len(texts), step):
            part = await self.service.translate_texts(request, texts[start : start + step], self.defaults, route, True)
            out += [hypotheses[0] for hypotheses in part]
        return out

    def _keep(self, name: str, path: Path) -> None:
        self._files[name] = path
        while len(self._files) > KEPT_FILES:
            _, oldest = self._files.popitem(last=False)
            oldest.unlink(missing_ok=True)  # a file this server wrote

    async def download_file(self, request: Request) -> Response:
        name = request.path_params["filename"]
        path = self._files.get(name)  # only the names this server gave out: no path reaches the disk
        if path is None or not path.is_file():
            raise BadRequest(f"no translated file {name!r} (translated files are kept until the server stops)", 404)
        original = name.split(".", 1)[1]
        return Response(
            path.read_bytes(),
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{original}"'},
        )
