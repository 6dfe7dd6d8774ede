"""`translate(plan)`, the work of `seq2seq-translate` on the plan cli/translate.py built (job.py's
TranslatePlan): load the job's model, translate a file or stdin, optionally score against a reference.

Input is read and written in chunks, each flushed as soon as it is translated, so a pipe that is
closed early still has every line translated before it, and line N of the output always belongs
to line N of the input (empty in, empty out). An output= file is written as a new file beside it that
replaces it once the translation is whole (seq2seq/artifacts/replacing.py: the rule of every writer).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from seq2seq.artifacts.replacing import output_lock, writing_file
from seq2seq.config import UserError
from seq2seq.data.corpus import read_lines
from seq2seq.inference.corpus_scores import corpus_bleu, corpus_chrf
from seq2seq.inference.job import TranslatePlan
from seq2seq.inference.loading import load_engine
from seq2seq.inference.resolved_model import ResolvedModel
from seq2seq.inference.translator_api import Translation, one_line

log = logging.getLogger("seq2seq.translate")
COMMAND = "seq2seq-translate"
CHUNK_LINES = 1000  # lines translated per chunk when reading a file or a pipe
FIRST_CHUNK_LINES = 16  # the first chunk: its translations are out in a fraction of a second


def _read_chunks(source: IO[bytes], interactive: bool, first_chunk: int, name: str) -> Iterator[list[str]]:
    """Lines in chunks; one line at a time when a person is typing. The first chunk is small, so
    the first translations appear quickly; later chunks are large, so sorting by length packs batches
    well. Undecodable bytes become U+FFFD with a warning: every input line still gets its output line."""
    chunk: list[str] = []
    limit = first_chunk
    for number, raw in enumerate(_lines_of(source, name), start=1):
        line = raw.rstrip(b"\n").removesuffix(b"\r")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("input line %d is not valid UTF-8; undecodable bytes replaced by U+FFFD", number)
            text = line.decode("utf-8", errors="replace")
        chunk.append(text.removeprefix("\ufeff") if number == 1 else text)
        if interactive or len(chunk) >= limit:
            yield chunk
            chunk, limit = [], CHUNK_LINES
    if chunk:
        yield chunk


def _lines_of(source: IO[bytes], name: str) -> Iterator[bytes]:
    """The raw lines of the input; a corrupt .gz or a read error becomes one line naming the file."""
    number = 0
    try:
        for raw in source:
            yield raw
            number += 1
    except (OSError, EOFError, zlib.error) as err:
        where = "stdin" if name == "-" else name
        raise UserError(f"{where}: cannot read after line {number}: {err}") from err


def _open_output(path: Path, name: str) -> IO[str]:
    """Opens the file the translations go to: output= itself when it is a device or pipe, else the new
    file that replaces output= when the translation is complete (seq2seq/artifacts/replacing.py)."""
    try:
        return open(path, "w", encoding="utf-8")  # noqa: SIM115
    except OSError as err:
        raise UserError(f"{name}: cannot write the translations ({err.strerror or err})") from err


def _write(sink: IO[str], text: str, name: str) -> None:
    """Writes and flushes a chunk of translations; a full disk or a read-only file system is one line.
    A reader that went away (BrokenPipeError) is not an error: translate() stops quietly."""
    try:
        sink.write(text)
        sink.flush()
    except BrokenPipeError:
        raise
    except OSError as err:
        where = "stdout" if name == "-" else name
        raise UserError(f"{where}: cannot write the translations ({err.strerror or err})") from err


def _format(index: int, nbest: list[Translation], n: int) -> str:
    if n == 1:
        return one_line(nbest[0].text) + "\n"
    return "".join(f"{index} ||| {one_line(t.text)} ||| {t.score:.4f}\n" for t in nbest)


def split_prefixes(lines: list[str]) -> tuple[list[str], list[str]]:
    """prefix=true input: "source<TAB>target prefix" per line; a line without a tab has no prefix."""
    pairs = [line.split("\t", 1) if "\t" in line else [line, ""] for line in lines]
    return [source for source, _ in pairs], [prefix for _, prefix in pairs]


def translate(plan: TranslatePlan) -> dict[str, Any]:
    """seq2seq-translate's work: the plan's input translated into its output (and scored)."""
    refuse_writing_over_inputs(plan)
    _refuse_closed_standard_streams(plan)
    references = _references(plan)  # before any work: a reference that cannot match costs no translation
    # The one rule of every writer, before the model loads: one writer per file, a file replaced only
    # when this command wrote it, by a new file renamed over it once the translation is whole.
    out, plots = plan.output, plan.job.attention
    output = writing_file(Path(out), "output", COMMAND, plan.replace_output) if out != "-" else None
    attention = output_lock(Path(plots), "attention", COMMAND, make_parent=True, folder=True) if plots else None
    with output or contextlib.nullcontext() as target, attention or contextlib.nullcontext():
        try:
            result, hypotheses = _translate(plan, target)
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: the lines so far are not a translation
            if target is not None and target != Path(out):
                log.warning("output=%s: left as it was; the translation was interrupted", out)
            raise
    if references is not None and hypotheses is not None:  # scored once the translations are kept
        result.update(_score(hypotheses, plan.reference, references))
    return result


def _references(plan: TranslatePlan) -> list[str] | None:
    """reference='s lines, read before the model loads; held against the input's lines where the input
    is a file that can be read twice (stdin's are counted as they are translated)."""
    if not plan.reference:
        return None
    lines = None
    if plan.input != "-" and os.path.isfile(plan.input):
        with _open_input(plan.input) as source:
            lines = sum(1 for _ in _lines_of(source, plan.input))
    references = read_lines(plan.reference)
    if lines is not None and lines != len(references):
        raise UserError(f"{plan.reference} has {len(references)} lines but input={plan.input} has {lines}")
    return references


def _translate(plan: TranslatePlan, target: Path | None) -> tuple[dict[str, Any], list[str] | None]:
    """The translations written; (what to report, the best translation of each line, or None where the
    reader went away first)."""
    translator = load_engine(plan.job)
    settings = plan.job.settings
    translator.languages.required_target(settings.tgt_lang)  # a multilingual model's: before output= is opened
    source = sys.stdin.buffer if plan.input == "-" else _open_input(plan.input)
    sink = sys.stdout if target is None else _open_output(target, plan.output)
    hypotheses: list[str] = []
    start, lines = time.monotonic(), 0
    plot = _attention_plotter(translator, plan.job.attention)
    try:
        first_chunk = min(settings.batch_size, FIRST_CHUNK_LINES)
        chunks = _read_chunks(source, _is_terminal(source), first_chunk, plan.input)
        for chunk in chunks:
            sources, prefixes = split_prefixes(chunk) if settings.prefix else (chunk, None)
            results = translator.translate_nbest(sources, prefixes, first_line_number=lines + 1)
            text = "".join(_format(lines + offset, nbest, settings.nbest) for offset, nbest in enumerate(results))
            hypotheses.extend(nbest[0].text for nbest in results)
            _write(sink, text, plan.output)
            # After the flush: a reader of the translations does not wait for the plots.
            plot(sources, [nbest[0].tokens for nbest in results], lines)  # 0-based ids, as in the n-best lines
            lines += len(chunk)
    except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing left to do
        return {"lines": lines}, None
    finally:
        if sink is not sys.stdout:
            with contextlib.suppress(OSError):  # every chunk was flushed; a failed write is already reported
                sink.close()
    seconds = time.monotonic() - start
    log.info("translated %d lines in %.1f s (%.1f lines/s)", lines, seconds, lines / max(seconds, 1e-9))
    if plan.job.attention:
        log.info("cross-attention heatmaps of the non-empty lines are in %s", plan.job.attention)
    return {"lines": lines, "seconds": seconds}, hypotheses


def _is_terminal(source: IO[bytes]) -> bool:
    """Whether a person types the input (stdin, or input=/dev/stdin, or input=/dev/tty): then each
    line is translated as it is entered."""
    try:
        return source.isatty()
    except (OSError, ValueError):  # a closed or unusual stream: read it as a file
        return False


def _refuse_closed_standard_streams(plan: TranslatePlan) -> None:
    """`<&-` or `>&-`: Python sets sys.stdin or sys.stdout to None when the descriptor is closed."""
    if plan.input == "-" and sys.stdin is None:
        raise UserError("stdin is closed: give input=<file> or a pipe")
    if plan.output == "-" and sys.stdout is None:
        raise UserError("stdout is closed: give output=<file> or a pipe")


def refuse_writing_over_inputs(plan: TranslatePlan) -> None:
    """The output is opened for writing (emptied) before the input is read: an output that is the input
    file, the reference or a file of the model (its checkpoint, tokenizer, exports: any file of the run
    or model directory it loads), by any path, symlink or redirection, would lose it. Only regular files
    are compared (a terminal or /dev/null can be both ends without harm)."""
    output = _regular_file_id(plan.output, sys.stdout)
    if output is None:
        return
    where = "stdout" if plan.output == "-" else f"output={plan.output}"
    named = {"input": (plan.input, sys.stdin), "reference": (plan.reference, None)}
    for key, (path, stream) in named.items():
        if path is not None and _regular_file_id(path, stream) == output:
            what = "stdin" if path == "-" else f"{key}={path}"
            raise UserError(f"{where} is the same file as {what}: writing the translations would empty it")
    for key, path in _model_files(plan.job.model):
        if _regular_file_id(str(path), None) == output:
            raise UserError(f"{where} is {path}, which {key} reads: writing the translations would empty it")


def _model_files(model: ResolvedModel) -> Iterator[tuple[str, Path]]:
    """(key, file) for every file the model keys may read: all of a directory given (a run, an export),
    and for a checkpoint file, the tokenizer files beside it and, in a run's checkpoints/, its run's."""
    from seq2seq.artifacts.run_dir import CHECKPOINTS_DIR, TOKENIZER_FILES

    given = [("run=" + model.run, Path(model.run))] if model.run else []
    given += [(f"checkpoint={model.checkpoint}", Path(p)) for p in str(model.checkpoint or "").split(",") if p]
    for key, path in given:
        if path.is_file():
            yield key, path
            for directory in (path.parent, path.parent.parent):
                yield from ((key, directory / name) for name in TOKENIZER_FILES)
            path = path.parent.parent if path.parent.name == CHECKPOINTS_DIR else None
        if path is not None and path.is_dir():
            for root, _, names in os.walk(path):
                yield from ((key, Path(root) / name) for name in names)


def _regular_file_id(path: str, stream: IO[Any] | None) -> tuple[int, int] | None:
    """(device, inode) of a path, or of `stream` for "-", when it is a regular file; else None."""
    try:
        info = os.fstat(stream.fileno()) if path == "-" and stream is not None else os.stat(path)
    except (OSError, ValueError, AttributeError):  # missing, closed, or a stream without a descriptor
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def _attention_plotter(translator: Any, directory: str | None) -> Callable[[list[str], list[list[int]], int], Any]:
    """Writes each chunk's cross-attention PNGs as the chunk is translated (stdin may be endless)."""
    if not directory:
        return lambda lines, outputs, first: None
    from seq2seq.inference.attention_plots import (
        make_directory,
        write_cross_attention_pngs,
    )  # matplotlib only when asked

    target = make_directory(Path(directory))  # a bad directory fails before any translating
    return lambda lines, outputs, first: write_cross_attention_pngs(translator, lines, outputs, target, first)


def _open_input(path: str) -> IO[bytes]:
    """A file, or anything else that reads as a stream of lines: a pipe or FIFO (input=/dev/stdin, the
    shell's input=<(...), i.e. /dev/fd/N), a character device (input=/dev/null: no lines). A directory
    is refused: it has no lines to read."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UserError(f"{path}: no such input file") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read the input ({err.strerror or err})") from err
    if stat.S_ISDIR(mode):
        raise UserError(f"{path}: is a directory; give input= a file of lines (or - for standard input)")
    import gzip

    try:
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    except OSError as err:
        raise UserError(f"{path}: cannot read the input ({err.strerror or err})") from err


def _score(hypotheses: list[str], reference_path: str, references: list[str] | None = None) -> dict[str, float]:
    """Corpus BLEU and chrF of the translations against reference_path's lines (`references`: read already)."""
    references = read_lines(reference_path) if references is None else references
    if len(references) != len(hypotheses):  # stdin's lines: known only now, the translations kept
        raise UserError(
            f"{reference_path} has {len(references)} lines but the input had {len(hypotheses)} "
            "(the translations are written; score them with a reference of as many lines)"
        )
    bleu, chrf = corpus_bleu(hypotheses, references), corpus_chrf(hypotheses, references)
    print(bleu.report, file=sys.stderr)
    print(chrf.report, file=sys.stderr)
    return {"bleu": bleu.score, "chrf": chrf.score}
