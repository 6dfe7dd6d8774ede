"""Raw text in, translations out: tokenize, sort by length, batch, search, detokenize, restore order.

The Python API (`Translator.load`, `translate`, `translate_nbest`), on which `seq2seq-translate` and
validation during training are built, so all three decode the same way. No Hydra needed:

    from seq2seq.inference import Translator
    translator = Translator.load("outputs/my-run", beam=5)
    translator.translate(["A man rides a bike."])  # ["Ein Mann fährt Fahrrad."]
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from seq2seq.startup import prepare_process

# Before torch loads, whichever way this class was reached (seq2seq.inference or this module): the
# settings oneDNN and OpenMP read once, as the commands set them.
prepare_process()

import torch

from seq2seq.data.tokenizer import EOS_ID, PAD_ID, Tokenizers, decoder_start_id
from seq2seq.data.vocab_pruning import pruned_record
from seq2seq.device import half_precision_on_cpu, pick_device
from seq2seq.inference.ensemble import Ensemble
from seq2seq.inference.job import DecodingJob, decoding_job
from seq2seq.inference.sampling import SamplingRule
from seq2seq.inference.search import Hypothesis, SearchRules, beam_search, greedy_search
from seq2seq.inference.settings import DecodingSettings
from seq2seq.inference.target_language import ModelLanguages
from seq2seq.inference.torch_model import check_precision, load_model
from seq2seq.inference.translator_api import (
    Translation,
    check_beam_fits,
    check_prefix_fits,
    checked_input,
    decoding_config,
    encode_sources,
    output_budget,
    sources_to_decode,
    to_translate,
)
from seq2seq.model.transformer import Transformer


class Translator:
    """A loaded model and its tokenizers, set up once, that translates lists of strings (`translate`).
    `from_job` builds one from a decoding job (job.py), `load` from a path and keyword settings."""

    kind = "torch"  # the engine it is (TranslatorAPI.kind)
    # The Python API's loaders set it: each item one line, one with a line break refused (check_one_line).
    # The commands' and validation's lines were split at \n already: another break character in one is text.
    one_line_items = False

    def __init__(
        self,
        model: Transformer | Ensemble,
        tokenizers: Tokenizers,
        device: torch.device,
        settings: DecodingSettings = DecodingSettings(),  # noqa: B008 (frozen: one shared default is safe)
        languages: ModelLanguages | None = None,
    ) -> None:
        """`settings`: how it decodes until `decoding_with` says otherwise (their src_lang, for the
        zero-shot warning, and tgt_lang: the direction); `languages`: what the model knows of
        languages (a multilingual one's tags)."""
        self.model = model
        self.tokenizers = tokenizers
        self.device = device
        self.max_positions = model.max_positions if isinstance(model, Ensemble) else model.cfg.max_positions
        first = model.members[0] if isinstance(model, Ensemble) else model
        self.start_id = decoder_start_id(first.cfg.decoder_start)  # also banned from the output, with pad
        self.languages = languages or ModelLanguages(None)
        self.languages.check(settings.src_lang, settings.tgt_lang)
        self._set(settings)
        # One generator for the translator's life: the same lines in the same calls give the same samples.
        self.generator = torch.Generator(device=device).manual_seed(settings.seed)

    def _set(self, settings: DecodingSettings) -> None:
        self.settings = settings
        # None: search (greedy or beam); else `nbest` samples per line
        self.sampling = (
            SamplingRule(settings.temperature, settings.top_k, settings.top_p) if settings.sampling else None
        )

    def with_languages(self, src_lang: str | None, tgt_lang: str | None) -> Translator:
        """This translator (the same model, nothing copied but settings) translating src_lang -> tgt_lang:
        how validation and the server translate each direction of a multilingual model."""
        self.languages.check(src_lang, tgt_lang)
        other = copy.copy(self)  # the generator shared: its samples go on from where this one's are
        other.settings = dataclasses.replace(self.settings, src_lang=src_lang, tgt_lang=tgt_lang)
        return other

    def decoding_with(self, settings: DecodingSettings) -> Translator:
        """This translator decoding with `settings`: a view that shares the model and changes nothing in
        this one, which other callers (the server's other requests) go on using as it is. The settings
        checked themselves as they were made (DecodingSettings); against the model, a beam needs as many
        target tokens (as `load` checks)."""
        check_beam_fits(settings.beam, self.tokenizers.tgt.get_vocab_size())
        other = copy.copy(self)
        other._set(settings)
        if settings.sampling:  # a generator of its own: the settings' seed alone decides the samples
            other.generator = torch.Generator(device=self.device).manual_seed(settings.seed)
        return other

    @classmethod
    def from_job(cls, job: DecodingJob) -> Translator:
        """The Translator of a decoding job: its model (run= or checkpoint=, several comma-separated: an
        ensemble; run= by the model file as resolved, refused where it was written again since), its
        settings and its device, precision and threads. The PyTorch engine of
        `seq2seq.inference.loading` (seq2seq-translate, seq2seq-serve) and of `load`."""
        model_file = job.model.unchanged_model_file()
        settings, options = job.settings, job.options
        device = pick_device(options.device)
        check_precision(options.precision, device)
        if settings.sampling:
            SamplingRule(settings.temperature, settings.top_k, settings.top_p)  # its checks, before loading
        checkpoints = job.model.checkpoint.split(",") if job.model.checkpoint else None
        if options.threads is not None:
            torch.set_num_threads(options.threads)
        model, tokenizers, data = load_model(
            job.model.run, checkpoints, options.precision, device, settings.beam, model_file
        )
        return cls(model, tokenizers, device, settings, ModelLanguages.of(data, tokenizers))

    @classmethod
    def load(cls, path: str | Path | Sequence[str | Path], **settings: Any) -> Translator:
        """Loads a model once for translating many lists of lines, on PyTorch. `path` and the keyword
        settings (beam, nbest, length_penalty, max_len_a, max_len_b, batch_size, precision, device,
        threads, sampling, seed) are those of `seq2seq.inference.translator_api.decoding_config`, with
        seq2seq-translate's defaults; `seq2seq.inference.load` takes the same and picks the engine.
        Each item it translates must be one line: one with a line break is refused (check_one_line).
        Bad files or settings raise `seq2seq.config.UserError` with a one-line message naming the key
        (a setting of the wrong type is also a TypeError, a bad value also a ValueError).
        """
        translator = cls.from_job(decoding_job(decoding_config(path, engine="torch", **settings)))
        translator.one_line_items = True
        return translator

    def encode(self, lines: list[str], line_numbers: Sequence[int] | None = None) -> list[list[int]]:
        """The lines' `encode_sources` + EOS: what the encoder reads."""
        sources = encode_sources(self, lines, self.settings.tgt_lang, line_numbers, self.settings.src_lang)
        return [[*ids, EOS_ID] for ids in sources]

    def encode_prefixes(self, prefixes: list[str], line_numbers: Sequence[int] | None = None) -> list[list[int]]:
        """Target ids of each forced prefix (after the target language's tag under
        data.lang_tag=decoder_start); one that leaves no room for EOS within the model's positions is an
        error naming its line (as in `encode`)."""
        tag = self.languages.forced_tag(self.settings.tgt_lang)
        encoded = [[*tag, *ids] for ids in self.tokenizers.encode_tgt(prefixes)]
        numbers = line_numbers if line_numbers is not None else range(1, len(prefixes) + 1)
        for number, ids in zip(numbers, encoded, strict=True):
            check_prefix_fits(len(ids), self.max_positions, number)
        return encoded

    def _search(self, src: torch.Tensor, prefixes: list[list[int]] | None) -> list[list[Hypothesis]]:
        source_tokens = ((src != PAD_ID).sum(dim=1) - 1).tolist()  # without </s>
        prefix_tokens = [len(p) for p in prefixes] if prefixes is not None else [0] * len(source_tokens)
        max_len = torch.tensor(
            [
                output_budget(n, p, self.settings.max_len_a, self.settings.max_len_b, self.max_positions)
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
        given = len(self.languages.forced_tag(self.settings.tgt_lang))  # a decoder_start tag: given, not predicted
        # A pretrained NLLB-200/M2M-100/mBART-50 model's layout decodes as transformers' generate does.
        rules = SearchRules.GENERATE if self.languages.counts_forced_tag else SearchRules.CTRANSLATE2
        # A pruned vocabulary renormalises after banning pad and <s> (generate's renormalize_logits on its export).
        renormalise = rules.renormalises or pruned_record(self.tokenizers) is not None
        if self.sampling is not None:  # nbest samples per line: each line `nbest` times in the batch
            repeat = lambda x: None if x is None else x.repeat_interleave(self.settings.nbest, dim=0)  # noqa: E731
            hyps = greedy_search(
                self.model, repeat(src), self.start_id, EOS_ID, repeat(max_len), self.settings.length_penalty, multiple,
                repeat(forced), self.sampling, self.generator, given, rules, renormalise,
            )  # fmt: skip
            return [hyps[i : i + self.settings.nbest] for i in range(0, len(hyps), self.settings.nbest)]
        if self.settings.beam == 1:
            hyps = greedy_search(
                self.model,
                src,
                self.start_id,
                EOS_ID,
                max_len,
                self.settings.length_penalty,
                multiple,
                forced,
                given=given,
                rules=rules,
                renormalise=renormalise,
            )
            return [[h] for h in hyps]
        return beam_search(
            self.model,
            src,
            self.start_id,
            EOS_ID,
            max_len,
            self.settings.beam,
            self.settings.length_penalty,
            self.settings.nbest,
            multiple,
            forced,
            given,
            rules,
            renormalise,
        )

    def translate(self, lines: str | Iterable[str], prefixes: str | Iterable[str] | None = None) -> str | list[str]:
        """The best translation of each line, in input order; with `prefixes`, each translation starts
        with its line's prefix (target text; "" for none). A str is one line, and gets a str back."""
        if isinstance(lines, str):
            return self.translate([lines], None if prefixes is None else [prefixes])[0]
        return [nbest[0].text for nbest in self.translate_nbest(lines, prefixes)]

    @torch.inference_mode()
    def translate_nbest(
        self,
        lines: str | Iterable[str],
        prefixes: str | Iterable[str] | None = None,
        first_line_number: int = 1,
        sources: Sequence[list[int]] | None = None,
    ) -> list[list[Translation]] | list[Translation]:
        """`nbest` translations (or samples) per line, best score first, in input order (for a str, one
        line: its list). Empty lines stay empty, unless they have a prefix: a translation always starts
        with its prefix. `first_line_number` numbers the lines in warnings and errors; `sources`: the
        lines' `encode_sources`, if the caller has them (not tokenized again)."""
        if isinstance(lines, str):
            return self.translate_nbest([lines], None if prefixes is None else [prefixes], first_line_number)[0]
        lines, prefixes = checked_input(lines, prefixes, self.one_line_items)
        self.model.eval()
        results: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in lines]
        todo = to_translate(lines, prefixes)
        numbers = [first_line_number + i for i in todo]  # a skipped empty line keeps its number
        ids = sources_to_decode(self, lines, todo, first_line_number, sources)
        encoded = {i: [*line_ids, EOS_ID] for i, line_ids in zip(todo, ids, strict=True)}
        forced = None
        if prefixes is not None or self.languages.forced_tag(self.settings.tgt_lang):
            prefixes = prefixes if prefixes is not None else [""] * len(lines)
            forced = dict(zip(todo, self.encode_prefixes([prefixes[i] for i in todo], numbers), strict=True))
        # Longest first: similar lengths share a batch (little padding), and the slowest batch shows up early.
        todo.sort(key=lambda i: len(encoded[i]), reverse=True)
        for batch in _chunks(todo, self.settings.batch_size):
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
