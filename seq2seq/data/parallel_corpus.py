"""A corpus as parallel files in one folder, the layout data.kind=parallel_files reads with {src} and
{tgt} in its file names: <split>.<src>-<tgt>.<lang>, each direction's pairs line by line.
seq2seq-distill writes its student's corpus so: here are what it reads of the corpus it starts from
(each direction's training pairs, the held-out ones once), the files' names, their writing (`write_pairs`,
into a new folder that seq2seq/artifacts/replacing.py's write_files_into, above this layer, then moves
into place), and the data settings that read them back."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig

from seq2seq.config import DataConfig, UserError
from seq2seq.data.corpus import iter_split, require_pairs, split_files, unzip
from seq2seq.data.directions import Direction, direction_settings, each_direction

# {"valid": {direction: (sources, references)}, "test": ...}
HeldOut = dict[str, dict[str, tuple[list[str], list[str]]]]


def split_pairs(one: DataConfig, split: str) -> tuple[list[str], list[str]]:
    """(sources, targets) of one direction's split; a split without a pair is the corpus's one-line error."""
    sources, targets = unzip(iter_split(one, split))
    require_pairs(one, split, len(sources))
    return sources, targets


def training_pairs(corpus: DataConfig) -> Iterator[tuple[Direction, list[str], list[str]]]:
    """Each direction of `corpus` with its training pairs (sources, targets), one direction at a time."""
    for direction, one in each_direction(corpus):
        yield direction, *split_pairs(one, "train")


def held_out(corpus: DataConfig) -> HeldOut:
    """The original pairs a model trained on `corpus` is validated and tested on, per direction (no
    "test" when the corpus has no test split; no validation split is a one-line error)."""
    found: HeldOut = {}
    for split in ("valid", "test"):
        for direction, one in each_direction(corpus):
            pairs = iter_split(one, split)
            if pairs is None:
                if split == "valid":
                    raise UserError(f"data.kind={one.kind}: the corpus has no validation split ({direction.name})")
                break
            sources, references = unzip(pairs)
            require_pairs(one, split, len(sources))
            found.setdefault(split, {})[direction.name] = (sources, references)
    return found


def corpus_test_pairs(corpus: DataConfig, directions: Sequence[Direction]) -> dict[str, tuple[list[str], list[str]]]:
    """The corpus's own test pairs of each of `directions` it has (Multi30k: every pair of its languages),
    though it was not configured with them; one without its files is left out."""
    found = {}
    for direction in directions:
        one = direction_settings(corpus, direction)
        try:
            files = split_files(one, "test")
        except UserError:  # Multi30k without this language's test file
            continue
        if not all(Path(file).is_file() for file in files):  # no test pairs of it: trained, not tested
            continue
        pairs = iter_split(one, "test")  # a file that is there but wrong is the one-line error it always is
        sources, references = unzip(pairs) if pairs is not None else ([], [])
        if sources:
            found[direction.name] = (sources, references)
    return found


def pair_files(folder: Path, split: str, direction: Direction) -> tuple[Path, Path]:
    """<split>.<src>-<tgt>.<src> and .<tgt> in `folder`: the two files of one direction's split."""
    name = f"{split}.{direction.name}"
    return folder / f"{name}.{direction.src}", folder / f"{name}.{direction.tgt}"


def write_pairs(folder: Path, split: str, pairs: dict[str, tuple[list[str], list[str]]]) -> None:
    """Each direction's pairs of `split` ({"de-en": (sources, targets)}) as its two files in `folder`
    (pair_files), a line per text in UTF-8 with \\n line ends."""
    for name, sides in pairs.items():
        for path, lines in zip(pair_files(folder, split, Direction(*name.split("-"))), sides, strict=True):
            path.write_bytes("".join(f"{line}\n" for line in lines).encode("utf-8"))


def read_pairs(folder: Path, split: str, direction: Direction) -> tuple[list[str], list[str]]:
    """One direction's (sources, targets) of `split` as `write_pairs` wrote them into `folder`."""
    src, tgt = (path.read_text(encoding="utf-8").splitlines() for path in pair_files(folder, split, direction))
    return src, tgt


def reading_files(data: DictConfig, root: Path, train_folder: str, has_test: bool) -> DictConfig:
    """The data settings `data` reading pair_files under `root`: the training pairs from `train_folder`,
    the validation and test pairs from original/."""
    d = copy.deepcopy(data)
    d.kind, d.dir, d.hub_name, d.hub_subset, d.train, d.valid, d.test = "parallel_files", *[None] * 6
    for split in ("train", "valid", "test"):
        folder = train_folder if split == "train" else "original"
        for side in ("src", "tgt"):
            if split == "test" and not has_test:
                d[f"{split}_{side}"] = None
                continue
            if d.directions:  # each direction's files: {src} and {tgt} become its codes
                name = f"{split}.{{src}}-{{tgt}}.{{{side}}}"
            else:
                name = f"{split}.{d.src_lang}-{d.tgt_lang}.{d.src_lang if side == 'src' else d.tgt_lang}"
            d[f"{split}_{side}"] = str(root / folder / name)
    return d
