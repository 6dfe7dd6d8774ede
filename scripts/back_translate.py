"""Monolingual target-language text back-translated into the source by a reverse model: a corpus for
data.corpora, tagged there (Sennrich et al. 2016; Caswell et al. 2019, "Tagged Back-Translation").

    python scripts/back_translate.py --model runs/de-en --input mono.de --src en --tgt de --out bt/ \\
        [--sampling] [--beam 5] [--chunk-lines 1000]

writes bt/train.en (the model's translations) and bt/train.de (the monolingual lines as they were,
one per line), which training reads as one more corpus with a weight and `tag: true`:

    'data.corpora=[..., {name: bt, train_src: bt/train.en, train_tgt: bt/train.de, weight: 1, tag: true}]'

The translations are seq2seq-distill's (seq2seq/distill/translations.py): written a chunk at a time,
resumed after a kill without translating a finished line again, and cached by the model's weights,
the lines and the decoding settings, so a second run with the same ones reads them back. The lines
are read from --input and written out a chunk at a time, so memory stays flat in their number. --sampling
draws each translation from the model's distribution (Edunov et al. 2018: better than beam at scale)
with --seed; the default is beam search. Refused in one line before anything is translated: a model that
does not translate --tgt into --src, --input text that py3langid reads as another language than --tgt
(--no-language-check to skip), a model beside another run's tokenizer. .back-translation.json records
the languages, which training checks the corpus against (seq2seq/data/corpora.py). Nothing of the
user's is rewritten: --out must not hold train.<src> or train.<tgt> already (but for this script's own,
from the same cache entry).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

# isort: off
from seq2seq.startup import prepare_process

# Before torch loads (seq2seq.distill imports it), as the commands do: else OpenMP's threads spin long
# and, on a machine shared with other work, take the cores from it while the script decodes.
prepare_process()
# isort: on

from seq2seq.artifacts.replacing import write_new_json  # noqa: E402
from seq2seq.config import UserError  # noqa: E402
from seq2seq.data.corpora import BACK_TRANSLATION_MARK  # noqa: E402
from seq2seq.data.corpus import iter_lines  # noqa: E402
from seq2seq.distill.source_language import SAMPLE_LINES, SURE  # noqa: E402
from seq2seq.distill.teacher import Teacher, read_teacher  # noqa: E402
from seq2seq.distill.translations import (  # noqa: E402
    cache_folder,
    cache_key,
    iter_translations,
    translate_cached,
    weight_digests,
)
from seq2seq.inference import load  # noqa: E402
from seq2seq.inference.target_language import UNNAMED  # noqa: E402

MARK = BACK_TRANSLATION_MARK  # what this script writes beside the pairs: which cache entry, which languages


class FileLines:
    """--input's lines as seq2seq-distill's translations read a list of them (its length, iteration from
    the start, slices in order, a chunk at a time), read from the file as they are asked for: memory holds
    a chunk, not the monolingual corpus (millions of lines)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.count = sum(1 for _ in iter_lines(self.path))  # a file that cannot be read is refused here
        self._reader: Iterator[str] = iter(())
        self._at = 0  # the line _reader gives next

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[str]:
        return iter_lines(self.path)

    def __getitem__(self, index: slice) -> list[str]:
        if not isinstance(index, slice) or index.step not in (None, 1):
            raise TypeError("FileLines takes slices in order, lines[start:stop]")
        start, stop, _ = index.indices(self.count)
        if start < self._at or self._at == 0:  # from the start again: iter_lines reads forward only
            self._reader, self._at = iter_lines(self.path), 0
        for _ in islice(self._reader, start - self._at):
            pass
        lines = list(islice(self._reader, max(stop - start, 0)))
        self._at = start + len(lines)
        return lines


def write_pairs(out: Path, names: list[str], translations: Iterable[list[str]], targets: Iterable[str]) -> None:
    """names[0]: each line's best translation, names[1]: the line as it was, a line at a time; each file
    is written beside its name and moved into place once whole."""
    partial = [out / f"{name}.partial" for name in names]
    try:
        with partial[0].open("w", encoding="utf-8") as sources, partial[1].open("w", encoding="utf-8") as real:
            for nbest, line in zip(translations, targets, strict=True):
                sources.write(nbest[0] + "\n")
                real.write(line + "\n")
        for path, name in zip(partial, names, strict=True):
            path.replace(out / name)
    finally:
        for path in partial:
            path.unlink(missing_ok=True)


def model_direction(teacher: Teacher, src: str, tgt: str) -> None:
    """The reverse model must translate `tgt` into `src`: its training config's languages say."""
    data = teacher.config["data"]
    trained = [str(d) for d in data.get("directions") or []] or [f"{data['src_lang']}-{data['tgt_lang']}"]
    if f"{tgt}-{src}" not in trained:
        raise UserError(
            f"--model {teacher.paths[0]}: translates {', '.join(trained)}, not {tgt}-{src}; back-translation "
            f"of {tgt} text into {src} needs a {tgt}-{src} model"
        )


def input_language(lines: list[str], expected: str, where: str) -> None:
    """The monolingual text must be in --tgt, the language the reverse model reads: its first lines,
    identified among every language py3langid knows, as seq2seq-distill checks a corpus's sources
    (seq2seq/distill/source_language.py). Refused in one line when they read as another language with
    probability SURE or more; without py3langid, or for a code it does not know, nothing is checked."""
    code = expected.partition("_")[0]
    if importlib.util.find_spec("py3langid") is None or code in UNNAMED:
        return
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if code not in identifier.nb_classes:
        return
    found, probability = identifier.classify("\n".join(lines[:SAMPLE_LINES]))
    if found != code and probability >= SURE:
        raise UserError(
            f"--input {where}: reads as {found} (py3langid, {probability:.0%} sure, first {SAMPLE_LINES} lines), "
            f"not {code} (--tgt), the language the reverse model reads; --no-language-check if it is {code}"
        )


def decoding(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the cache key holds (and the engine gets)."""
    if args.sampling:
        return {"sampling": True, "temperature": args.temperature, "seed": args.seed, "beam": 1}
    return {"sampling": False, "beam": args.beam, "length_penalty": args.length_penalty}


def engine_for(teacher: Teacher, settings: dict[str, Any], args: argparse.Namespace) -> Any:
    kwargs = {"batch_size": args.batch_size, "threads": args.threads, "device": args.device}
    if settings["sampling"]:
        from seq2seq.inference.sampling import SamplingRule  # imports torch

        kwargs.update(sampling=SamplingRule(temperature=settings["temperature"]), seed=settings["seed"], beam=1)
    else:
        kwargs.update(beam=settings["beam"], length_penalty=settings["length_penalty"])
    return load(teacher.paths if len(teacher.paths) > 1 else teacher.paths[0], **kwargs)


def check_output(out: Path, names: list[str], key: str) -> None:
    """Refuses to write over pairs this script did not make from this cache entry."""
    mark = out / MARK
    ours = mark.is_file() and json.loads(mark.read_text()).get("key") == key
    for name in names:
        if (out / name).exists() and not ours:
            raise UserError(f"{out / name}: exists and was not written by this back-translation; choose another --out")


def back_translate(args: argparse.Namespace) -> dict[str, Any]:
    teacher = read_teacher(args.model, given_as="--model ")
    model_direction(teacher, args.src, args.tgt)
    targets = FileLines(args.input)  # read a chunk at a time, never held whole
    if not targets:
        raise UserError(f"--input {args.input}: no lines to back-translate")
    if args.language_check:
        input_language(targets, args.tgt, args.input)
    settings = decoding(args)
    key, parts = cache_key(
        weight_digests(teacher.weights), targets, {**settings, "direction": f"{args.tgt}-{args.src}"}
    )
    out = Path(args.out)
    names = [f"train.{args.src}", f"train.{args.tgt}"]
    check_output(out, names, key)
    # Loaded before anything is written: a tokenizer that is not the model's is refused here, in one line
    engine = engine_for(teacher, settings, args).with_languages(args.tgt, args.src)
    folder = cache_folder(args.cache) / key  # seq2seq-distill's cache: the same translations are one entry
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "key.json").is_file():
        write_new_json(folder / "key.json", parts)
    progress = translate_cached(engine, targets, folder, args.chunk_lines)
    out.mkdir(parents=True, exist_ok=True)
    write_pairs(out, names, iter_translations(folder, len(targets)), targets)
    summary = {
        "key": key,
        "src": args.src,  # what training checks a corpus of these files against (seq2seq/data/corpora.py)
        "tgt": args.tgt,
        "lines": len(targets),
        "cache": str(folder),
        "settings": settings,
        "seconds": progress.seconds,
    }
    (out / MARK).write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the reverse (tgt -> src) run directory, or checkpoints a,b")
    parser.add_argument("--input", required=True, help="monolingual --tgt text, one sentence per line")
    parser.add_argument("--src", required=True, help="the language the forward model reads (written here)")
    parser.add_argument("--tgt", required=True, help="the language of --input")
    parser.add_argument("--out", required=True)
    parser.add_argument("--sampling", action="store_true", help="sample each translation instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--chunk-lines", type=int, default=1000)
    parser.add_argument(
        "--no-language-check", dest="language_check", action="store_false", help="do not identify --input's language"
    )
    parser.add_argument("--cache", default=None, help="default: $SEQ2SEQ_CACHE/distill, as seq2seq-distill's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(json.dumps(back_translate(args)))
    except UserError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
