"""What a translator returns for one hypothesis, what both engines offer (`TranslatorAPI`), the Python
API's settings as a translate config (`decoding_config`, made a job by job.decoding_job), and the
checks and limits both apply, written once; no torch here, so the CTranslate2 path needs none."""

from __future__ import annotations

import difflib
import inspect
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.config import ConfigTypeError, ConfigValueError, TranslateConfig, UserError
from seq2seq.data.tokenizer import Tokenizers

if TYPE_CHECKING:
    from seq2seq.inference.sampling import SamplingRule  # its module imports torch
    from seq2seq.inference.settings import DecodingSettings
    from seq2seq.inference.target_language import ModelLanguages

T = TypeVar("T")
log = logging.getLogger("seq2seq.translate")


@dataclass
class Translation:
    text: str
    score: float  # log P(output + EOS) / (predicted tokens + 1) ** length_penalty (search.Hypothesis); 0.0 for an empty line
    tokens: list[int]  # target token ids, without BOS and EOS (a forced prefix, and a decoder_start tag, included)


class TranslatorAPI(Protocol):
    """What seq2seq-translate, seq2seq-serve and the engine probe use of a translator: PyTorch's
    `Translator` and `CTranslate2Translator` both have it."""

    kind: Literal["torch", "ctranslate2"]  # which engine it is (the value of seq2seq-translate's engine=)
    tokenizers: Tokenizers
    max_positions: int  # the longest source or target, </s> included, that the model takes
    languages: ModelLanguages  # its languages; a multilingual model's tags
    settings: DecodingSettings  # how it decodes: as loaded, or as `decoding_with` set this view
    # True when the Python API's loaders made it: an item with a line break is refused (check_one_line).
    one_line_items: bool

    # A str is one line (and gets one result back); any other iterable of str is lines.
    def translate(self, lines: str | Iterable[str], prefixes: str | Iterable[str] | None = None) -> str | list[str]: ...

    # `sources`: the lines' `encode_sources`, where the caller has them already (the server counts a request's
    # tokens with them): the lines are then not tokenized again.
    def translate_nbest(
        self,
        lines: str | Iterable[str],
        prefixes: str | Iterable[str] | None = None,
        first_line_number: int = 1,
        sources: Sequence[list[int]] | None = None,
    ) -> list[list[Translation]] | list[Translation]: ...

    # The same loaded model translating src_lang -> tgt_lang (a multilingual model's tag: target_language).
    def with_languages(self, src_lang: str | None, tgt_lang: str | None) -> TranslatorAPI: ...

    # The same loaded model decoding with other settings, as a view: the engine itself is not changed.
    def decoding_with(self, settings: DecodingSettings) -> TranslatorAPI: ...


ENGINE_NAMES = {"torch": "PyTorch", "ctranslate2": "CTranslate2"}  # for the log

# The vocabulary has a token for every byte, "\n" and "\r" included, so a model can output them; written
# as they are they would split a translation over two lines ("\r" too, for universal-newline readers).
# Python's str.splitlines() also breaks at these, and a sampled translation may contain any of them.
_SPLITLINES_BREAKS = "\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAKS = str.maketrans(_SPLITLINES_BREAKS, " " * len(_SPLITLINES_BREAKS))


def one_line(text: str) -> str:
    """`text` with every character that any line reader breaks at turned into a space: what is written
    where one translation must stay one line (a file of translations, one per source line)."""
    return text.translate(_LINE_BREAKS)


def decoding_config(
    path: str | Path | Sequence[str | Path],
    *,
    engine: str = TranslateConfig.engine,
    beam: int = TranslateConfig.beam,
    nbest: int = TranslateConfig.nbest,
    length_penalty: float = TranslateConfig.length_penalty,
    max_len_a: float = TranslateConfig.max_len_a,
    max_len_b: int = TranslateConfig.max_len_b,
    batch_size: int = TranslateConfig.batch_size,
    precision: str = TranslateConfig.precision,
    device: str = TranslateConfig.device,
    threads: int | None = TranslateConfig.threads,
    sampling: SamplingRule | bool | None = None,
    seed: int = TranslateConfig.seed,
    tgt_lang: str | None = TranslateConfig.tgt_lang,
    src_lang: str | None = TranslateConfig.src_lang,
    **unknown: Any,
) -> TranslateConfig:
    """The translate config of the Python API's `load(path, **settings)`: seq2seq-translate's keys, with
    its defaults (TranslateConfig's); the loaders build their decoding job of it (job.decoding_job),
    which checks it before any model is read.

    path: a run directory (the weights-only model/ that training writes at its end, else best.pt, else
        last.pt; or its ctranslate2/ export, by the engine), a training checkpoint (.pt) with the
        tokenizer beside it or in its run directory, a `seq2seq-export` directory (safetensors or
        CTranslate2) or its model.safetensors, a Hugging Face Marian directory, or a list of
        checkpoints of one run to decode as an ensemble.
    engine: auto (as seq2seq-translate picks), torch or ctranslate2. beam: 1 is greedy search. nbest:
    hypotheses (or samples) per line of `translate_nbest`. Hypotheses rank by log P / (tokens + 1) **
    length_penalty; a line has at most max_len_a * source tokens + max_len_b output tokens. precision:
    auto (fp32 for decoding), fp32, bf16, fp16 on a GPU, or int8 (CTranslate2's). device: auto, cpu,
    cuda, cuda:N. threads: of either engine (None: one per core). sampling: sample instead of
    searching (a SamplingRule; True: its defaults, as the command's sampling=true), seeded by `seed`.
    tgt_lang: the language a multilingual model writes (required for one); src_lang: the input's, for the zero-shot warning. Bad settings raise
    `seq2seq.config.UserError`, one line naming the key (also a TypeError or ValueError, by kind).
    """
    if unknown:  # Python's own TypeError named this function, not the setting the caller meant
        key, known = next(iter(unknown)), [name for name in inspect.signature(decoding_config).parameters][1:-1]
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"the settings: {', '.join(known)}"
        raise ConfigTypeError(f"config error: {key}: not a decoding setting; {hint}")
    items = [path] if isinstance(path, str | Path) else list(path) if isinstance(path, Sequence) else None
    if not items or not all(isinstance(item, str | Path) for item in items):
        raise ConfigTypeError(f"path={path!r}: must be a path (str or Path) or a list of checkpoint paths")
    paths = [str(item) for item in items]
    run = paths[0] if len(paths) == 1 and path_kind(paths[0]) is PathKind.RUN else None
    rule_keys = ("temperature", "top_k", "top_p")
    if sampling is None or isinstance(sampling, bool):  # True: the command's sampling=true, its defaults
        sampling_on, rule = bool(sampling), {}
    elif all(hasattr(sampling, key) for key in rule_keys):  # a SamplingRule (not imported: it imports torch)
        sampling_on, rule = True, {key: getattr(sampling, key) for key in rule_keys}
    else:
        raise ConfigTypeError(f"config error: sampling={sampling!r}: must be a SamplingRule, True or None")
    cfg = TranslateConfig(
        run=run,
        checkpoint=None if run else ",".join(paths),
        engine=engine,
        beam=beam,
        nbest=nbest,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        batch_size=batch_size,
        precision=precision,
        device=device,
        threads=threads,
        sampling=sampling_on,
        seed=seed,
        tgt_lang=tgt_lang,
        src_lang=src_lang,
        **rule,
    )
    return cfg


def check_beam_fits(beam: int, vocabulary_size: int) -> None:
    """A beam needs that many distinct tokens to extend its hypotheses with."""
    if beam > vocabulary_size:
        raise UserError(f"beam={beam} is larger than the target vocabulary ({vocabulary_size})")


def as_lines(lines: Any, name: str = "lines") -> list[str]:
    """The API's input as a list of str: any iterable (a generator would otherwise be used up by the
    first pass over it, leaving empty translations), each item a str. A str itself is refused here:
    iterated it would be its characters; the translators take it as one line before calling this."""
    if isinstance(lines, str | bytes) or not isinstance(lines, Iterable):
        raise ConfigTypeError(f"{name}: must be a list (or other iterable) of str, not {type(lines).__name__}")
    items = list(lines)
    for number, item in enumerate(items):
        if not isinstance(item, str):
            raise ConfigTypeError(f"{name}[{number}]: must be a str, not {type(item).__name__}")
    return items


def checked_input(lines: Any, prefixes: Any, one_line_items: bool) -> tuple[list[str], list[str] | None]:
    """What both engines' translate_nbest take, as lists of str (`as_lines`), a prefix per line, and
    with `one_line_items` (the Python API's loaders) no line break in any (`check_one_line`)."""
    lines = as_lines(lines)
    prefixes = None if prefixes is None else as_lines(prefixes, "prefixes")
    if prefixes is not None and len(prefixes) != len(lines):
        raise ValueError(f"{len(lines)} lines but {len(prefixes)} prefixes")
    if one_line_items:
        check_one_line(lines)
        check_one_line(prefixes or [], "prefixes")
    return lines, prefixes


def check_one_line(items: list[str], name: str = "lines") -> None:
    """The Python API's rule: each item is one line, translated to one line. An item with a line break
    (any character str.splitlines breaks at: \\n, \\r, U+2028, ...) is refused, naming it: the model
    would translate its lines as one, and splitting it here would return more translations than the
    caller's items, which it zips against. seq2seq-translate and seq2seq-serve split their input at
    \\n themselves and pass any other such character on as text (their loaders leave this off)."""
    for index, item in enumerate(items):
        if found := _A_LINE_BREAK.search(item):
            raise ConfigValueError(
                f"{name}[{index}]: contains a line break (U+{ord(found.group()):04X}); give one line per item, "
                "or split it first (str.splitlines)"
            )


_A_LINE_BREAK = re.compile(f"[{re.escape(_SPLITLINES_BREAKS)}]")


def to_translate(lines: list[str], prefixes: list[str] | None) -> list[int]:
    """The indices of the lines to decode: an empty (or blank) line translates to an empty line without
    decoding, unless it has a target prefix, which every translation starts with."""
    return [i for i, line in enumerate(lines) if line.strip() or (prefixes is not None and prefixes[i])]


def fit_source(tokens: list[T], max_positions: int, line_number: int, log: logging.Logger) -> list[T]:
    """A source line's tokens (ids or pieces), cut to leave room for </s> within the model's positions,
    with a warning on `log` that names the line (CTranslate2 alone would cut them silently)."""
    if len(tokens) + 1 > max_positions:
        log.warning(
            "input line %d has %d tokens, more than the model's %d positions: translating its first %d",
            line_number,
            len(tokens),
            max_positions,
            max_positions - 1,
        )
    return tokens[: max_positions - 1]


def encode_sources(
    engine: TranslatorAPI,
    lines: Sequence[str],
    tgt_lang: str | None,
    line_numbers: Sequence[int] | None = None,
    src_lang: str | None = None,
) -> list[list[int]]:
    """Each line's source ids as both engines decode it into `tgt_lang`, </s> left out: a tag of the
    model's that the line starts with removed (ModelLanguages.untagged), tgt_lang's tag put before it
    under data.lang_tag=source_prefix (src_lang's code under language_codes), cut to the model's positions with a warning that names the line
    (by `line_numbers`, one per line; 1, 2, ... without them). Reads the engine's tokenizer, languages
    and positions, nothing it decodes with: any thread may call it."""
    languages = engine.languages
    numbers = line_numbers if line_numbers is not None else range(1, len(lines) + 1)
    texts = [languages.untagged(line, tgt_lang, number) for line, number in zip(lines, numbers, strict=True)]
    tag = languages.source_tag(tgt_lang, src_lang)
    return [
        fit_source([*tag, *ids], engine.max_positions, number, log)
        for number, ids in zip(numbers, engine.tokenizers.encode_src(texts), strict=True)
    ]


def sources_to_decode(
    engine: TranslatorAPI,
    lines: Sequence[str],
    todo: Sequence[int],
    first_line_number: int,
    sources: Sequence[list[int]] | None,
) -> list[list[int]]:
    """The source ids of `lines[i]` for each i in `todo`, as `translate_nbest` decodes them: taken from
    `sources` (every line's `encode_sources`) where the caller has them, else encoded now, each line
    numbered from `first_line_number` in warnings."""
    if sources is not None:
        return [sources[i] for i in todo]
    numbers = [first_line_number + i for i in todo]
    settings = engine.settings
    return encode_sources(engine, [lines[i] for i in todo], settings.tgt_lang, numbers, settings.src_lang)


def check_prefix_fits(prefix_tokens: int, max_positions: int, line_number: int) -> None:
    """A forced target prefix must leave room for <s> and </s> within the model's positions."""
    if prefix_tokens + 2 > max_positions:
        raise UserError(
            f"input line {line_number}: the target prefix has {prefix_tokens} tokens, more than "
            f"the {max_positions - 2} the model's {max_positions} positions leave room for"
        )


def output_budget(source_tokens: int, prefix_tokens: int, a: float, b: int, max_positions: int) -> int:
    """The most output tokens a line may have, </s> included, in both engines (one function, so that
    they cannot round or clamp differently): a * (source tokens + </s>) + b, at least the prefix + b
    (a prefix never uses up a line's output), within the model's positions."""
    budget = int((source_tokens + 1) * a + b)
    if prefix_tokens:
        return max(1, min(max(budget, prefix_tokens + b), max_positions - 1))
    return max(1, min(budget, max_positions))
