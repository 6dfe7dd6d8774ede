"""The engines a server decodes with, loaded as seq2seq-translate loads them (`load_engine`).

The engine for the server's own settings (what /translate uses) is loaded at start. A /v1/translate
request whose settings seq2seq-translate would decode with PyTorch (n-best lists, sampling, a prefix in
beam search, on a server whose engine is the CTranslate2 export) is decoded with PyTorch, loaded the
first time such a request comes, so that it gets the lines and scores the command writes; the page's
attention maps need PyTorch too. Only the server's engine thread (engine_thread.py) uses the engines.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference.choice import choose_engine
from seq2seq.inference.job import DecodingJob
from seq2seq.inference.loading import load_engine
from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.translator_api import ENGINE_NAMES, TranslatorAPI

if TYPE_CHECKING:
    from seq2seq.inference.translator import Translator  # its module imports torch


class Engines:
    def __init__(self, job: DecodingJob) -> None:
        """`job`: the model's, as the command built it (its model resolved once: each request's engine
        is chosen without the disk)."""
        self.job = job
        self.files = job.model
        self.main = load_engine(job)
        self.main_kind = self.main.kind
        self._torch: Translator | None = cast("Translator", self.main) if self.main_kind == "torch" else None
        self._kinds: dict[DecodingSettings, str] = {}

    @property
    def name(self) -> str:
        return ENGINE_NAMES[self.main_kind]

    @property
    def tokenizers(self) -> Tokenizers:
        return self.main.tokenizers

    def kind(self, settings: DecodingSettings) -> str:
        """The engine seq2seq-translate decodes `settings` with; a forced engine that cannot is a
        UserError (e.g. "config error: engine=ctranslate2: sampling=true ...")."""
        if settings not in self._kinds:
            self._kinds[settings] = choose_engine(dataclasses.replace(self.job, settings=settings)).engine
        return self._kinds[settings]

    def for_settings(self, settings: DecodingSettings) -> TranslatorAPI:
        return self.main if self.kind(settings) == self.main_kind else self.torch()

    def has_torch_weights(self) -> bool:
        return not self.files.given_export

    def torch(self) -> Translator:
        """PyTorch's Translator for this model, loaded on first use."""
        if self._torch is None:
            options = self.job.options
            precision = "auto" if options.precision == "int8" else options.precision  # int8 is CTranslate2's
            torch_job = dataclasses.replace(
                self.job, engine="torch", options=dataclasses.replace(options, precision=precision)
            )
            self._torch = cast("Translator", load_engine(torch_job))
        return self._torch
