"""Raw text in, translations out: tokenize, sort by length, batch, search, detokenize, restore order.

The Python API (`Translator.load`, `translate`, `translate_nbest`), on which `seq2seq-translate` and
validation during training are built, so all three decode the same way. No Hydra needed:

    from seq2seq.inference import Translator
    translator = Translator.load("outputs/2026-11-23/18-12-22", beam=5)
    translator.translate(["A man rides a bike."])  # ["Ein Mann fährt Fahrrad."]
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import torch
from omegaconf import DictConfig

from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.config import TranslateConfig, validate_search
from seq2seq.data.tokenizer import EOS_ID, PAD_ID, Tokenizers, decoder_start_id
from seq2seq.device import half_precision_on_cpu, pick_device
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.loading import check_precision, load_model
from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.search import Hypothesis, beam_search, greedy_search
from seq2seq.inference.translation import (
    Translation,
    as_lines,
    check_prefix_fits,
    fit_source,
    output_budget,
    to_translate,
)
from seq2seq.model.transformer import Transformer

log = logging.getLogger(__name__)


class Translator:
    """A loaded model and its tokenizers, set up once, that translates lists of strings (`translate`).
    `from_config` builds one from a translate config, `load` from a path and keyword settings."""

    def __init__(
        self,
        model: Transformer | Ensemble,
        tokenizers: Tokenizers,
        device: torch.device,
        beam: int = 1,
        length_penalty: float = 1.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        nbest: int = 1,
        batch_size: int = 64,
        *,
        sampling: SamplingRule | None = None,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.tokenizers = tokenizers
        self.device = device
        self.beam = beam
        self.length_penalty = length_penalty
        self.max_len_a = max_len_a
        self.max_len_b = max_len_b
        self.nbest = nbest
        self.batch_size = batch_size
        self.sampling = sampling  # None: search (greedy or beam); else `nbest` samples per line
        self.seed = seed
        validate_search(self)  # the rules of seq2seq-translate's keys, types included
        # One generator for the translator's life: the same lines in the same calls give the same samples.
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.max_positions = model.max_positions if isinstance(model, Ensemble) else model.cfg.max_positions
        first = model.members[0] if isinstance(model, Ensemble) else model
        self.start_id = decoder_start_id(first.cfg.decoder_start)  # also banned from the output, with pad

    @classmethod
    def from_config(cls, cfg: TranslateConfig | DictConfig) -> Translator:
        """The Translator that `cfg` describes: run= or checkpoint= (several, comma-separated: an
        ensemble), device, precision, search or sampling settings, batch size. How seq2seq-translate,
        seq2seq-serve and the engine probe load a PyTorch model."""
        device = pick_device(cfg.device)
        check_precision(cfg.precision, device)
        sampling = SamplingRule(cfg.temperature, cfg.top_k, cfg.top_p) if cfg.sampling else None
        checkpoints = str(cfg.checkpoint).split(",") if cfg.checkpoint else None
        model, tokenizers = load_model(cfg.run, checkpoints, cfg.precision, device, cfg.beam)
        return cls(
            model,
            tokenizers,
            device,
            beam=cfg.beam,
            length_penalty=cfg.length_penalty,
            max_len_a=cfg.max_len_a,
            max_len_b=cfg.max_len_b,
            nbest=cfg.nbest,
            batch_size=cfg.batch_size,
            sampling=sampling,
            seed=cfg.seed,
        )

    @classmethod
    def load(
        cls,
        path: str | Path | Sequence[str | Path],
        *,
        beam: int = 5,
        nbest: int = 1,
        length_penalty: float = 1.0,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        batch_size: int = 128,
        precision: str = "auto",
        device: str = "auto",
        sampling: SamplingRule | None = None,
        seed: int = 0,
    ) -> Translator:
        """Loads a model once for translating many lists of lines.

        path: a run directory (the weights-only model/ that training writes at its end, else best.pt,
            else last.pt), a training checkpoint (.pt) with the
            tokenizer beside it or in its run directory, a `seq2seq-export` directory or its
            model.safetensors, or a list of checkpoints of one run to decode as an ensemble.
        beam: 1 is greedy search. nbest: hypotheses (or samples) returned per line by `translate_nbest`.
        length_penalty: hypotheses are ranked by log P / (tokens + 1) ** length_penalty.
        max_len_a, max_len_b: at most a * source tokens + b output tokens per line.
        precision: auto (measured once per machine), fp32, bf16, or fp16 on a GPU.
        device: auto, cpu, cuda, cuda:N. sampling: sample instead of searching (see SamplingRule),
        seeded by `seed`.
        Bad files or settings raise `seq2seq.config.UserError` with a one-line message naming the key
        (a setting of the wrong type is also a TypeError, a bad value also a ValueError).
        """
        settings = dict(beam=beam, nbest=nbest, length_penalty=length_penalty, max_len_a=max_len_a)
        settings |= dict(max_len_b=max_len_b, batch_size=batch_size, sampling=sampling, seed=seed)
        validate_search(SimpleNamespace(**settings))  # before the model is loaded, not after
        paths = [str(path)] if isinstance(path, str | Path) else [str(p) for p in path]
        run = paths[0] if len(paths) == 1 and path_kind(paths[0]) is PathKind.RUN else None
        torch_device = pick_device(device)
        check_precision(precision, torch_device)
        model, tokenizers = load_model(run, None if run else paths, precision, torch_device, beam)
        return cls(model, tokenizers, torch_device, **settings)

    def encode(self, lines: list[str], line_numbers: Sequence[int] | None = None) -> list[list[int]]:
        """Source ids + EOS, cut to the model's positions with a warning that names the line (by
        `line_numbers`, one per line; 1, 2, ... without them)."""
        numbers = line_numbers if line_numbers is not None else range(1, len(lines) + 1)
        return [
            [*fit_source(ids, self.max_positions, number, log), EOS_ID]
            for number, ids in zip(numbers, self.tokenizers.encode_src(lines), strict=True)
        ]

    def encode_prefixes(self, prefixes: list[str], line_numbers: Sequence[int] | None = None) -> list[list[int]]:
        """Target ids of each forced prefix; one that leaves no room for EOS within the model's
        positions is an error naming its line (as in `encode`)."""
        encoded = self.tokenizers.encode_tgt(prefixes)
        numbers = line_numbers if line_numbers is not None else range(1, len(prefixes) + 1)
        for number, ids in zip(numbers, encoded, strict=True):
            check_prefix_fits(len(ids), self.max_positions, number)
        return encoded

    def _search(self, src: torch.Tensor, prefixes: list[list[int]] | None) -> list[list[Hypothesis]]:
        source_tokens = ((src != PAD_ID).sum(dim=1) - 1).tolist()  # without </s>
        prefix_tokens = [len(p) for p in prefixes] if prefixes is not None else [0] * len(source_tokens)
        max_len = torch.tensor(
            [
                output_budget(n, p, self.max_len_a, self.max_len_b, self.max_positions)
                for n, p in zip(source_tokens, prefix_tokens, strict=True)
            ],
            device=src.device,
        )
        forced = None
        if prefixes is not None and any(prefixes):
            forced = torch.full((len(prefixes), max(prefix_tokens)), -1, dtype=torch.long)
            for row, prefix in enumerate(prefixes):
                forced[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
            forced = forced.to(src.device)
        # A half-precision model on a CPU runs on oneDNN kernels built per matrix shape: let the batch
        # shrink in steps of 16 sentences so that few shapes occur (see speedups.rows_to_keep).
        multiple = 16 if half_precision_on_cpu(self.model.output.weight) else 1
        if self.sampling is not None:  # nbest samples per line: each line `nbest` times in the batch
            repeat = lambda x: None if x is None else x.repeat_interleave(self.nbest, dim=0)  # noqa: E731
            hyps = greedy_search(
                self.model, repeat(src), self.start_id, EOS_ID, repeat(max_len), self.length_penalty, multiple,
                repeat(forced), self.sampling, self.generator,
            )  # fmt: skip
            return [hyps[i : i + self.nbest] for i in range(0, len(hyps), self.nbest)]
        if self.beam == 1:
            hyps = greedy_search(self.model, src, self.start_id, EOS_ID, max_len, self.length_penalty, multiple, forced)
            return [[h] for h in hyps]
        return beam_search(
            self.model,
            src,
            self.start_id,
            EOS_ID,
            max_len,
            self.beam,
            self.length_penalty,
            self.nbest,
            multiple,
            forced,
        )

    def translate(self, lines: str | Iterable[str], prefixes: str | Iterable[str] | None = None) -> str | list[str]:
        """The best translation of each line, in input order; with `prefixes`, each translation starts
        with its line's prefix (target text; "" for none). A str is one line, and gets a str back."""
        if isinstance(lines, str):
            return self.translate([lines], None if prefixes is None else [prefixes])[0]
        return [nbest[0].text for nbest in self.translate_nbest(lines, prefixes)]

    @torch.inference_mode()
    def translate_nbest(
        self, lines: str | Iterable[str], prefixes: str | Iterable[str] | None = None, first_line_number: int = 1
    ) -> list[list[Translation]] | list[Translation]:
        """`nbest` translations (or samples) per line, best score first, in input order (for a str, one
        line: its list). Empty lines stay empty, unless they have a prefix: a translation always starts
        with its prefix. `first_line_number` numbers the lines in warnings and errors."""
        if isinstance(lines, str):
            return self.translate_nbest([lines], None if prefixes is None else [prefixes], first_line_number)[0]
        lines = as_lines(lines)
        prefixes = None if prefixes is None else as_lines(prefixes, "prefixes")
        if prefixes is not None and len(prefixes) != len(lines):
            raise ValueError(f"{len(lines)} lines but {len(prefixes)} prefixes")
        self.model.eval()
        results: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in lines]
        todo = to_translate(lines, prefixes)
        numbers = [first_line_number + i for i in todo]  # a skipped empty line keeps its number
        encoded = dict(zip(todo, self.encode([lines[i] for i in todo], numbers), strict=True))
        forced = None
        if prefixes is not None:
            forced = dict(zip(todo, self.encode_prefixes([prefixes[i] for i in todo], numbers), strict=True))
        # Longest first: similar lengths share a batch (little padding), and the slowest batch shows up early.
        todo.sort(key=lambda i: len(encoded[i]), reverse=True)
        for batch in _chunks(todo, self.batch_size):
            src = torch.full((len(batch), max(len(encoded[i]) for i in batch)), PAD_ID, dtype=torch.long)
            for row, i in enumerate(batch):
                src[row, : len(encoded[i])] = torch.tensor(encoded[i])
            batch_prefixes = [forced[i] for i in batch] if forced is not None else None
            for i, hyps in zip(batch, self._search(src.to(self.device), batch_prefixes), strict=True):
                texts = self.tokenizers.decode_tgt([h.tokens for h in hyps])
                results[i] = [Translation(t, h.score, h.tokens) for t, h in zip(texts, hyps, strict=True)]
        return results


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
