"""Decoding a CTranslate2 export (`seq2seq-export format=ctranslate2`) with CTranslate2, behind the
interface of `Translator`, so that `seq2seq-translate checkpoint=<export dir>` runs on it.

Why a second engine: CTranslate2 is the fastest engine for this model family on a CPU, and it starts
without torch (whose import is most of PyTorch decoding's start-up; `import ctranslate2` is a small
part of it: docs/performance.md). Its output equals ours line for line, greedy and beam (docs/export.md
says on what). This module imports neither torch nor the torch side of seq2seq.

The options that make CTranslate2 decode as `seq2seq.inference.search` does: our output budget is
per sentence, `max_len_a * (source tokens + </s>) + max_len_b` with </s> included, CTranslate2's
`max_decoding_length` is per call and excludes </s>, so sentences are decoded by budget, except that a
beam search with a length penalty runs once at the largest budget and again, by budget, for the lines
whose search may have reached their own (`_decode_at_largest_budget`); an immediate </s> is allowed
(`min_decoding_length=0`); <pad> and <s> (where the vocabulary has one) are never output.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from seq2seq.artifacts.ctranslate2_model import read_export, unreadable_model
from seq2seq.config import UserError, check_cuda_device
from seq2seq.cpu_sharing import usable_cores
from seq2seq.data.tokenizer import BOS, EOS, PAD
from seq2seq.inference import int8_probe
from seq2seq.inference.choice import choose_engine
from seq2seq.inference.job import DecodingJob, decoding_job
from seq2seq.inference.settings import DecodingSettings, EngineOptions
from seq2seq.inference.target_language import ModelLanguages
from seq2seq.inference.translator_api import (
    Translation,
    check_beam_fits,
    check_prefix_fits,
    checked_input,
    decoding_config,
    output_budget,
    sources_to_decode,
    to_translate,
)
from seq2seq.startup import prepare_process

log = logging.getLogger("seq2seq.translate")
CPU_BATCH_LINES = 32  # the most lines a CPU decodes in one beam-search batch (see CTranslate2Translator._post)
COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


class EngineUnavailable(UserError):
    """CTranslate2 is installed but cannot decode on the device asked for: its CUDA wheels load CUDA's
    libraries (cuBLAS of the CUDA major version they were built with) only at the first translation."""


def cuda_device_count() -> int:
    """GPUs as CTranslate2 counts them (0 without the package): how engine=auto and device=auto decide
    without importing torch."""
    prepare_process()  # before ctranslate2 loads, as the commands do
    try:
        import ctranslate2
    except ImportError:
        return 0
    return ctranslate2.get_cuda_device_count()


def _device(device: str, cuda_devices: int) -> tuple[str, int]:
    """CTranslate2's (device, device_index) for our device= ("auto": a GPU if there is one, as PyTorch's)."""
    if device == "auto":
        device = "cuda" if cuda_devices else "cpu"
    kind, _, index = device.partition(":")
    return kind, int(index or 0)


def thread_split(threads: int | None, device: str, sampling: bool) -> tuple[int, int]:
    """CTranslate2's (inter_threads, intra_threads) for our threads= (null: every usable core): on a CPU
    with two threads or more, two batches decoded at once, each on half the threads (CTranslate2's
    workers on one device share the weights: no more memory). Sampling keeps one batch at a time: each
    CTranslate2 thread draws from a generator of its own, so which thread took which batch would change
    the samples of a seed.

    Why: a beam step of these small models is too short to keep two threads busy, and a server's
    batches are small, so two replicas of half the threads decode more lines a second than one of all
    of them (docs/performance.md, "Two CTranslate2 replicas of one thread", has the figures and the
    machines they were taken on)."""
    if device != "cpu" or sampling:
        return 1, threads or 0
    threads = threads or usable_cores()
    return (2, threads // 2) if threads >= 2 else (1, threads)


class CTranslate2Translator:
    """`Translator`'s `translate` and `translate_nbest` on a CTranslate2 model directory:

    from seq2seq.inference import CTranslate2Translator
    translator = CTranslate2Translator.load("outputs/my-run", beam=5)  # no torch import
    translator.translate(["A man rides a bike."])
    """

    kind = "ctranslate2"  # the engine it is (TranslatorAPI.kind)
    one_line_items = False  # as Translator's: the Python API's loaders set it

    @classmethod
    def load(cls, path: str | Path, **settings: Any) -> CTranslate2Translator:
        """Loads a CTranslate2 model once for translating many lists of lines: as
        `seq2seq.inference.load(path, engine="ctranslate2", **settings)`, except that n-best lists and
        sampling are the caller's choice here (seq2seq-translate keeps them on PyTorch: CTranslate2's
        scores and samples differ from PyTorch's).

        path: a run directory (its ctranslate2/, which must be no older than its checkpoint) or a
            `seq2seq-export format=ctranslate2` directory. The settings are `Translator.load`'s
            (`seq2seq.inference.translator_api.decoding_config`), with `precision="int8"` (8-bit weights,
            quantised as the model loads); `sampling` is a `SamplingRule` (CTranslate2's sampler: other
            samples than PyTorch's from the same seed). Bad files or settings raise
            `seq2seq.config.UserError`, one line.
        """
        job = decoding_job(decoding_config(path, engine="ctranslate2", **settings))
        # Which export, by the engine choice's rules for a search: n-best and sampling are allowed here.
        search = dataclasses.replace(job.settings, nbest=1, sampling=False)
        choice = choose_engine(dataclasses.replace(job, settings=search))
        translator = load_export(job, choice.model)
        translator.one_line_items = True
        return translator

    def __init__(self, directory: str | Path, settings: DecodingSettings, options: EngineOptions) -> None:
        """`directory`: the CTranslate2 model; `settings`: how it decodes until `decoding_with` says
        otherwise; `options`: where and how it loads."""
        directory = Path(directory)
        prepare_process()  # before ctranslate2 loads, whichever way this class was reached
        try:
            import ctranslate2
        except ImportError as err:
            raise UserError(f"{directory}: a CTranslate2 model needs: pip install 'seq2seq[export]'") from err
        files = read_export(directory)
        self.tokenizers, self.max_positions = files.tokenizers, files.max_positions
        # What is never output: pad, and <s> where the vocabulary has one (a SentencePiece one has none;
        # naming a token it lacks would suppress <unk>, which CTranslate2 maps unknown names to).
        self.suppressed = [[t] for t in (PAD, BOS) if self.tokenizers.tgt.token_to_id(t) is not None]
        check_beam_fits(settings.beam, self.tokenizers.tgt.get_vocab_size())
        self.languages = ModelLanguages.of(files.languages, self.tokenizers)
        self.languages.check(settings.src_lang, settings.tgt_lang)
        self.settings = settings
        gpus = cuda_device_count()
        try:  # the message PyTorch's engine gives; engine=auto then tries PyTorch, which may see a GPU
            check_cuda_device(options.device, gpus)
        except UserError as err:
            raise EngineUnavailable(str(err)) from err
        device, index = _device(options.device, gpus)
        inter_threads, intra_threads = thread_split(options.threads, device, settings.sampling)
        try:
            self.engine = ctranslate2.Translator(
                str(directory),
                device=device,
                device_index=index,
                compute_type=COMPUTE_TYPES[options.precision],
                inter_threads=inter_threads,
                intra_threads=intra_threads,
            )
        except (RuntimeError, ValueError, IndexError) as err:  # IndexError: a model.bin zeroed at its start
            if device == "cuda" and "cuda" in str(err).lower():  # the GPU's libraries, not the file
                raise UserError(f"{directory}: CTranslate2 cannot load it: {str(err).splitlines()[0]}") from err
            raise unreadable_model(directory, err, ctranslate2.__version__) from err
        if device == "cuda":
            self._check_it_decodes_on_cuda(directory, ctranslate2.__version__)
        if settings.sampling:
            ctranslate2.set_random_seed(settings.seed)
        log.info("loaded %s (CTranslate2 %s, %s)", directory, ctranslate2.__version__, self.engine.compute_type)

    def with_languages(self, src_lang: str | None, tgt_lang: str | None) -> CTranslate2Translator:
        """As `Translator.with_languages`: the same loaded model translating src_lang -> tgt_lang."""
        self.languages.check(src_lang, tgt_lang)
        other = copy.copy(self)
        other.settings = dataclasses.replace(self.settings, src_lang=src_lang, tgt_lang=tgt_lang)
        return other

    def decoding_with(self, settings: DecodingSettings) -> CTranslate2Translator:
        """As `Translator.decoding_with`: the same loaded model, decoding with `settings` (never sampling
        here: seq2seq-translate's engine choice gives sampling to PyTorch)."""
        check_beam_fits(settings.beam, self.tokenizers.tgt.get_vocab_size())
        other = copy.copy(self)
        other.settings = settings
        return other

    def _check_it_decodes_on_cuda(self, directory: Path, version: str) -> None:
        """One token decoded now: a CTranslate2 wheel built for another CUDA than the machine's loads,
        then fails at its first translation (docs/performance.md, "A CTranslate2 wheel for another
        CUDA"): better at load time, where engine=auto can still choose PyTorch."""
        try:
            self.engine.translate_batch([[EOS]], max_decoding_length=1, beam_size=1)  # any token would do
        except RuntimeError as err:
            raise EngineUnavailable(
                f"{directory}: CTranslate2 {version} cannot decode on the GPU here: {str(err).splitlines()[0]} "
                "(engine=torch decodes on the GPU; device=cpu runs CTranslate2 on the CPU)"
            ) from err

    def translate(self, lines: str | Iterable[str], prefixes: str | Iterable[str] | None = None) -> str | list[str]:
        """As `Translator.translate`: a str is one line, and gets a str back."""
        if isinstance(lines, str):
            return self.translate([lines], None if prefixes is None else [prefixes])[0]
        return [nbest[0].text for nbest in self.translate_nbest(lines, prefixes)]

    def _source_tokens(self, ids: list[int]) -> list[str]:
        """A line's ids (translator_api.encode_sources) as the token names CTranslate2 reads (cut to the model's
        positions there, with its warning: CTranslate2 itself would cut them silently)."""
        return [self.tokenizers.src.id_to_token(i) for i in ids]

    def translate_nbest(
        self,
        lines: str | Iterable[str],
        prefixes: str | Iterable[str] | None = None,
        first_line_number: int = 1,
        sources: Sequence[list[int]] | None = None,
    ) -> list[list[Translation]] | list[Translation]:
        """As `Translator.translate_nbest`."""
        if isinstance(lines, str):  # one line: its n-best list
            return self.translate_nbest([lines], None if prefixes is None else [prefixes], first_line_number)[0]
        lines, prefixes = checked_input(lines, prefixes, self.one_line_items)
        settings, tok = self.settings, self.tokenizers
        results: list[list[Translation]] = [[Translation("", 0.0, [])] for _ in lines]
        todo = to_translate(lines, prefixes)
        ids = sources_to_decode(self, lines, todo, first_line_number, sources)
        tokens = {i: self._source_tokens(line_ids) for i, line_ids in zip(todo, ids, strict=True)}
        tag = [tok.tgt.id_to_token(i) for i in self.languages.forced_tag(self.settings.tgt_lang)]  # decoder_start
        forced = {
            i: [*tag, *(tok.tgt.encode(prefixes[i], add_special_tokens=False).tokens if prefixes else [])] for i in todo
        }
        for i in todo:
            check_prefix_fits(len(forced[i]), self.max_positions, first_line_number + i)
        budgets = {
            i: output_budget(len(tokens[i]), len(forced[i]), settings.max_len_a, settings.max_len_b, self.max_positions)
            for i in todo
        }
        options = dict(beam_size=settings.beam, num_hypotheses=settings.nbest, length_penalty=settings.length_penalty)
        if settings.sampling:
            options = dict(
                beam_size=1,
                num_hypotheses=settings.nbest,
                sampling_topk=settings.top_k or 0,  # CTranslate2: 0 samples from the whole vocabulary
                sampling_topp=settings.top_p,
                sampling_temperature=settings.temperature,
            )
        if only_eos := [i for i in todo if budgets[i] <= 1 and not forced[i]]:
            # A budget of one token leaves room for </s> alone (CTranslate2 refuses max_decoding_length=0):
            # the line is cut before its first token and, as every cut line, scored by its tokens alone.
            for i in only_eos:
                results[i] = [Translation("", 0.0, [])]
        rows = [i for i in todo if i not in only_eos]
        if tag and settings.length_penalty and settings.beam > 1 and not settings.sampling:
            options["num_hypotheses"] = settings.beam  # every finished hypothesis, ranked again by ours
        if (
            rows
            and not prefixes
            and not tag
            and not settings.sampling
            and settings.beam > 1
            and settings.length_penalty != 0
        ):
            outputs = self._decode_at_largest_budget(rows, tokens, budgets, options)
        else:
            outputs = self._decode_by_budget(rows, tokens, forced if prefixes or tag else None, budgets, options)
        for i, output in outputs.items():
            results[i] = self._translations(output, budgets[i], len(tag))
        return results

    def _translations(self, output: Any, budget: int, given: int) -> list[Translation]:
        """A line's `nbest` best translations of CTranslate2's `output` (decoded with max_decoding_length
        = `budget` - 1), scored and ranked as `seq2seq.inference.search.Hypothesis` says.

        Why they are scored again: with a target_prefix CTranslate2 leaves the prefix's log-probabilities
        out (as ours leaves out the `given` tag) but counts its tokens in the length it divides by; a
        decoder_start tag is given, not predicted, so ours does not. CTranslate2's ranking only orders
        the finished hypotheses: it returns all of them (num_hypotheses=beam) and they are ranked here.
        A pretrained NLLB-200/M2M-100/mBART-50 model's code counts, and so does the </s> that ends a line
        cut at its budget, as in transformers' `generate` (search.SearchRules.generate_lengths)."""
        alpha, scored = self.settings.length_penalty, []
        for hyp, score in zip(output.hypotheses, output.scores, strict=True):
            ids = [self.tokenizers.tgt.token_to_id(t) for t in hyp if t != EOS]
            if given and alpha:
                length = len(ids) + (0 if len(ids) >= budget - 1 else 1)  # CTranslate2's: EOS, unless cut
                log_prob = score * length**alpha
                counted = len(ids) + 1 if self.languages.counts_forced_tag else length - given
                score = log_prob / counted**alpha if counted > 0 else log_prob
            scored.append((score, ids))
        scored = sorted(scored, key=lambda pair: pair[0], reverse=True)[: self.settings.nbest]
        texts = self.tokenizers.decode_tgt([ids for _, ids in scored])
        return [Translation(text, score, ids) for text, (score, ids) in zip(texts, scored, strict=True)]

    def _decode_by_budget(
        self,
        rows: list[int],
        sources: dict[int, list[str]],
        forced: dict[int, list[str]] | None,
        budgets: dict[int, int],
        options: dict,
    ) -> dict[int, Any]:
        """One call per output budget. Every budget's group is queued at once (asynchronous): with
        inter_threads > 1 CTranslate2 decodes that many of them at the same time, each on its threads."""
        posted = []
        for budget in sorted({budgets[i] for i in rows}):
            group = [i for i in rows if budgets[i] == budget]
            posted.append((group, self._post(group, sources, forced, budget, options)))
        return {i: result.result() for group, pending in posted for i, result in zip(group, pending, strict=True)}

    def _decode_at_largest_budget(
        self, rows: list[int], sources: dict[int, list[str]], budgets: dict[int, int], options: dict
    ) -> dict[int, Any]:
        """Beam search in one call with the largest budget of `rows`, then again by budget for the lines
        whose search may have reached their own last step. Why: budgets follow source lengths, so the
        32 lines of a server's batch fell into ~14 calls of 2 lines; one call decodes them together.

        Why the result is the same as with each line's own budget: with a length penalty, CTranslate2
        ends a line's search at the first step T where it holds beam_size finished hypotheses (at most
        beam_size are added a step), and nothing before the last step depends on the budget. Asked for
        beam_size hypotheses, it returns at least one that finished at T (else beam_size had finished
        earlier), and a hypothesis finished at step t has t tokens (t + 1 when cut at the last step).
        So the longest returned hypothesis has T tokens or more: a line whose longest has fewer than
        its last step (budget - 2: max_decoding_length is budget - 1, counted from step 0) ended its
        search before its own budget could matter."""
        largest = max(budgets[i] for i in rows)
        options = {**options, "num_hypotheses": self.settings.beam}
        outputs = self._post(rows, sources, None, largest, options, small_batches=True)
        decoded = {i: result.result() for i, result in zip(rows, outputs, strict=True)}
        again = [
            i
            for i, output in decoded.items()
            if budgets[i] < largest and max(map(len, output.hypotheses)) >= budgets[i] - 2
        ]
        if again:
            decoded.update(self._decode_by_budget(again, sources, None, budgets, options))
        return decoded

    def _post(
        self,
        rows: list[int],
        sources: dict[int, list[str]],
        forced: dict[int, list[str]] | None,
        budget: int,
        options: dict,
        small_batches: bool = False,
    ) -> list[Any]:
        """Queues `rows` with one output budget; CTranslate2 sorts them by length and splits them into
        batches of at most batch_size lines; with `small_batches` on a CPU, of at most 32 lines, and
        split so that every worker (inter_threads) gets work: two batches each where they keep 8 lines.

        Why: mid-sized batches decoded fastest, and a server's small batch is fastest split so that each
        worker gets one or two (the figures: docs/performance.md, "Serving")."""
        batch_size = self.settings.batch_size
        if small_batches and self.engine.device == "cpu":
            per_worker = -(-len(rows) // self.engine.num_translators)
            batch_size = min(batch_size, CPU_BATCH_LINES, max(-(-per_worker // 2), min(8, per_worker)))
        return self.engine.translate_batch(
            [sources[i] for i in rows],
            [forced[i] or None for i in rows] if forced is not None else None,
            max_batch_size=batch_size,
            max_decoding_length=budget - 1,
            min_decoding_length=0,
            max_input_length=self.max_positions,
            suppress_sequences=self.suppressed,
            return_scores=True,
            asynchronous=True,
            **options,
        )


def load_export(job: DecodingJob, model: str) -> CTranslate2Translator:
    """The CTranslate2 `model` that the engine choice picked for `job`, loaded with the job's settings
    and options; precision=int8 said where it is slower than fp32 (say_if_int8_is_slower)."""
    if job.options.precision == "int8":
        say_if_int8_is_slower(job, model)
    return CTranslate2Translator(model, job.settings, job.options)


def export_candidate(
    export: str | Path, settings: DecodingSettings, options: EngineOptions, candidate: str
) -> CTranslate2Translator:
    """The run's export as the engine probe times it: "ctranslate2" in fp32, "int8" quantised as it loads."""
    precision = "int8" if candidate == "int8" else "fp32"
    return CTranslate2Translator(export, settings, dataclasses.replace(options, precision=precision))


def probe_loader(job: DecodingJob, export: str | Path) -> Callable[[str], CTranslate2Translator]:
    """What the engine probe times for a run: its CTranslate2 `export`, "ctranslate2" (fp32) or "int8",
    searching as `job` says (the probe times a search: one hypothesis, no sampling)."""
    settings = dataclasses.replace(job.settings, nbest=1, sampling=False)
    return functools.partial(export_candidate, export, settings, job.options)


def say_if_int8_is_slower(job: DecodingJob, export: str | Path) -> None:
    """A warning where the run's `export` decodes slower with 8-bit weights than in fp32 on this CPU (timed
    once per machine, model shape and search, searching as `job` says, and cached: int8_probe.py).
    An export given by hand (checkpoint=) is not timed: the measurement is kept per run."""
    if job.model.checkpoint:
        return
    timing = int8_probe.cached_timing(job, ("ctranslate2", "int8"), probe_loader(job, export))
    fp32, int8 = timing.seconds["ctranslate2"], timing.seconds["int8"]
    if int8 > fp32:
        log.warning(
            "precision=int8 is slower than fp32 on this CPU: %.2f s against %.2f s for the same %d sentences "
            "(measured once, cached in %s); precision=auto decodes faster here",
            int8,
            fp32,
            int8_probe.PROBE_SENTENCES,
            int8_probe.cache_file(),
        )
