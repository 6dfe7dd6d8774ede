"""What seq2seq-serve runs, decided once where its config is read (cli/serve.py builds it): a decoding
job per model (inference/job.py: the resolved model, the server's own DecodingSettings, the engine
options) and the server's bounds. Below the command nothing reads the config. No torch, no Starlette:
the command builds it before either loads."""

from __future__ import annotations

from dataclasses import dataclass

from seq2seq.inference.job import DecodingJob
from seq2seq.serve.requests import Limits


@dataclass(frozen=True)
class ModelPlan:
    """One model behind the server: its job (whose settings are what /translate decodes with, and what a
    /v1/translate request changes), and the language codes /languages gives it (None: its own)."""

    job: DecodingJob
    source_lang: str | None = None
    target_lang: str | None = None


@dataclass(frozen=True)
class ServePlan:
    models: tuple[ModelPlan, ...]  # run= (or checkpoint=) first: the page's and /v1's default; then runs=
    host: str
    port: int
    limits: Limits  # what one request may ask for: 413 and 400 beyond
    max_batch_tokens: int  # each model's batcher: source tokens gathered into one batch ...
    max_wait_ms: float  # ... and how long a request waits for others to join it
    cors_origins: tuple[str, ...]
    max_file_bytes: int
    drain_seconds: float  # after SIGTERM
    receive_seconds: float  # a request that stops arriving: 408
    api_keys_file: str | None = None
