"""From a data config to tokenized, filtered splits, cached as Arrow so the next run starts at once.

    train pairs, read line by line -> raw.arrow -> tokenizer trained on it -> tokenize + filter
    (datasets.map, written to disk) -> save_to_disk(cache/<key>) ... next run: memory-map its Arrow files

The training split never sits in memory whole, neither while it is built (the files are read line by
line into an Arrow file on disk, and tokenized from there in batches) nor while training (the token
ids are views of the memory-mapped Arrow file, never Python lists): memory does not grow with the
corpus. The cache key covers the data config and each corpus file's path and content (its SHA-256,
read at every start), so an edited file is re-read even when its size and modification time were
kept (`cp -p`, `rsync -t`, `tar`); docs/data.md gives the cost.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from itertools import chain, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from seq2seq.config import DataConfig, UserError
from seq2seq.data.cache_builds import owner, remove_abandoned_builds
from seq2seq.data.cleaning import CleaningReport, refuse_emptied_head
from seq2seq.data.cleaning import summary as cleaning_summary
from seq2seq.data.corpora import (
    BACK_TRANSLATION_TAG,
    CORPUS,
    check_equal_sides,
    iter_training_rows,
    mixed_rows,
    refuse_emptied_corpora,
)
from seq2seq.data.corpus import iter_split, require_pairs, unzip
from seq2seq.data.corpus_plan import CACHE_VERSION as CACHE_VERSION  # the key's, named here as it always was
from seq2seq.data.corpus_plan import CorpusPlan, TokenizerPlan, plan_corpus
from seq2seq.data.corpus_plan import content_digest as content_digest
from seq2seq.data.directions import LanguageTags, language_tags
from seq2seq.data.epoch_mix import direction_shares, epoch_counts_by_corpus, weighted_direction_counts
from seq2seq.data.fairseq_vocab import FairseqTokenizers
from seq2seq.data.multilingual import (
    DIRECTION,
    attach_directions,
    direction_tag_ids,
    iter_directed_pairs,
    require_every_direction,
    tag_directions,
    tag_ids,
    tokenizer_texts,
    unzip_directed,
)
from seq2seq.data.sentencepiece import SentencePieceTokenizers
from seq2seq.data.sentencepiece_training import train_sentencepiece
from seq2seq.data.tokenizer import Tokenizers, load_pretrained_tokenizers
from seq2seq.data.vocab_pruning import describe, prune_to_corpus, pruned_record
from seq2seq.measurement_cache import CACHE_SETTING
from seq2seq.stop_signals import stop_signals_raise

if TYPE_CHECKING:
    import datasets  # imported where a cache is built: start-up time that a cached run does not need

log = logging.getLogger(__name__)
CLEANING_FILE = "cleaning.json"  # data.clean's report, in the cache and copied into the run


@dataclass
class TokenColumn:
    """One side of a split as flat token ids plus row offsets, one pair of arrays per Arrow record
    batch: views of the memory-mapped file, so loading a split copies no token."""

    values: list[np.ndarray]
    offsets: list[np.ndarray]  # offsets[k][i]:offsets[k][i + 1] is row i of chunk k in values[k]

    def __post_init__(self) -> None:
        self.starts = np.cumsum([0] + [len(o) - 1 for o in self.offsets])  # first row of each chunk

    @classmethod
    def from_table(cls, table: pa.Table, column: str) -> TokenColumn:
        chunks = table.column(column).chunks
        return cls(
            [chunk.values.to_numpy(zero_copy_only=False) for chunk in chunks],
            [chunk.offsets.to_numpy() for chunk in chunks],
        )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(o) for o in self.offsets]) if self.offsets else np.zeros(0, np.int64)

    def __getitem__(self, index: int) -> np.ndarray:
        chunk = int(np.searchsorted(self.starts, index, side="right")) - 1
        row = index - self.starts[chunk]
        offsets = self.offsets[chunk]
        return self.values[chunk][offsets[row] : offsets[row + 1]]


@dataclass
class Split:
    src: TokenColumn
    tgt: TokenColumn
    src_text: list[str] | None = None  # raw text, kept for held-out splits (BLEU needs it)
    tgt_text: list[str] | None = None
    # data.directions: each row's direction (an index into direction_names); None for one direction.
    directions: np.ndarray | None = None
    direction_names: tuple[str, ...] = ()
    # data.lang_tag=decoder_start or both: each target's first id is its tag (given, not predicted)
    target_tag: bool = False
    sampling_temperature: float | None = None  # the training split's data.sampling_temperature
    # data.corpora: each row's corpus (an index into corpus_names), shown corpus_weights times an epoch
    corpora: np.ndarray | None = None
    corpus_names: tuple[str, ...] = ()
    corpus_weights: tuple[float, ...] = ()

    def __len__(self) -> int:
        return len(self.src)

    def direction_rows(self) -> dict[str, np.ndarray]:
        """data.directions: each direction's rows ("en-de" -> indices), for scoring per direction."""
        if self.directions is None:
            return {}
        return {name: np.flatnonzero(self.directions == i) for i, name in enumerate(self.direction_names)}


@dataclass(frozen=True)
class FilterStats:
    """What became of the training pairs: read, kept, and dropped by the reason `keep_pair` gives."""

    train_pairs: int  # read from the corpus (after data.clean, whose report counts its drops)
    dropped_empty: int
    dropped_too_long: int
    dropped_length_ratio: int
    train_kept: int


@dataclass(frozen=True)
class StreamingStats:
    """data.streaming: training tokenizes the corpus as it goes; the cache holds the tokenizer alone."""

    tokenizer_pairs: int  # the pairs the tokenizer learnt from (the head of the corpus)


@dataclass
class PreparedData:
    tokenizers: Tokenizers | SentencePieceTokenizers
    train: Split | None  # None with data.streaming
    valid: Split
    stats: FilterStats | StreamingStats  # StreamingStats with data.streaming
    languages: LanguageTags | None = None  # data.directions: the tags and where they go
    corpus: list[dict[str, Any]] = field(default_factory=list)  # the files read (corpus_files); checkpoints record them
    cleaning: dict[str, Any] | None = None  # data.clean's report (cleaning.json), when a rule ran
    plan: CorpusPlan | None = None  # what it was prepared from: a streamed run reads its streams as it trains


def cache_key(data: DataConfig, pretrained: Path | None = None, files: list[dict[str, Any]] | None = None) -> str:
    """The cache key of the corpus `data` describes (`plan_corpus(...).key`), for a caller without its
    plan. `pretrained`: a directory of SentencePiece tokenizers used instead of training one; their
    contents are part of the key. `files`: the corpus's files (a plan's), when the caller has them."""
    return plan_corpus(data, pretrained, files).key


def keep_pair(src_len: int, tgt_len: int, max_tokens: int, max_ratio: float) -> str | None:
    """None to keep a training pair, else the reason it is dropped."""
    if src_len == 0 or tgt_len == 0:
        return "dropped_empty"
    if src_len > max_tokens or tgt_len > max_tokens:
        return "dropped_too_long"
    if max(src_len, tgt_len) / min(src_len, tgt_len) > max_ratio:
        return "dropped_length_ratio"
    return None


# A line longer than data.max_tokens x this many characters fits in data.max_tokens tokens only if its
# tokens average more than 16 characters. Such lines are dropped before tokenization: BPE's time grows
# with the square of a word's length, so one long line without a space could stall it.
MAX_CHARS_PER_TOKEN = 16


def drop_by_text(pairs: Iterable[tuple], max_tokens: int, dropped: dict[str, int]) -> Iterator[tuple]:
    """The pairs worth tokenizing; the others are counted in `dropped` under the reason `keep_pair`
    would give them (an empty side first, as there). A side of whitespace alone is empty: a byte-level
    tokenizer makes a token of a lone space, which `keep_pair` would then count as a length ratio. A
    pair is (source, target) or, with data.directions, (source, target, direction)."""
    limit = max_tokens * MAX_CHARS_PER_TOKEN
    for pair in pairs:
        src, tgt = pair[0], pair[1]
        if not src.strip() or not tgt.strip():
            dropped["dropped_empty"] += 1
        elif len(src) > limit or len(tgt) > limit:
            dropped["dropped_too_long"] += 1
        else:
            yield pair


def _token_features() -> dict[str, datasets.Sequence]:
    import datasets

    return {
        "src_ids": datasets.Sequence(datasets.Value("int32")),
        "tgt_ids": datasets.Sequence(datasets.Value("int32")),
    }


ROWS_PER_BATCH = 10_000


def text_schema(multilingual: bool, corpora: bool) -> pa.Schema:
    """The raw training rows' columns: the two texts, then the direction and corpus indices a run has
    (`multilingual`: data.directions; `corpora`: data.corpora)."""
    columns = [("src_text", pa.string()), ("tgt_text", pa.string())]
    if multilingual:
        columns.append((DIRECTION, pa.int16()))
    if corpora:
        columns.append((CORPUS, pa.int16()))
    return pa.schema(columns)


def _write_text(pairs: Iterator[tuple], path: Path, schema: pa.Schema) -> int:
    """Streams (source, target[, direction]) rows into an Arrow file, ROWS_PER_BATCH at a time. Returns the count."""
    count = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        while chunk := list(islice(pairs, ROWS_PER_BATCH)):
            writer.write_batch(pa.record_batch(list(map(list, zip(*chunk, strict=True))), schema=schema))
            count += len(chunk)
    return count


def _texts(dataset: datasets.Dataset, column: str) -> Iterator[str]:
    for batch in dataset.iter(batch_size=ROWS_PER_BATCH):
        yield from batch[column]


def _tokenize(
    tokenizers: Tokenizers, sources: list[str], targets: list[str], tagging: Callable | None = None
) -> datasets.Dataset:
    """A held-out split: token ids and the raw text (BLEU needs it). Held-out splits are small.
    `tagging`: (source ids, target ids) -> (tagged ids, their direction column), for data.directions."""
    import datasets

    columns = {"src_ids": tokenizers.encode_src(sources), "tgt_ids": tokenizers.encode_tgt(targets)}
    features = {"src_text": datasets.Value("string"), "tgt_text": datasets.Value("string"), **_token_features()}
    if tagging is not None:
        columns["src_ids"], columns["tgt_ids"], columns[DIRECTION] = tagging(columns["src_ids"], columns["tgt_ids"])
        features[DIRECTION] = datasets.Value("int16")
    return _in_memory({"src_text": sources, "tgt_text": targets, **columns}, datasets.Features(features))


def _in_memory(columns: dict, features: datasets.Features) -> datasets.Dataset:
    """`datasets.Dataset.from_dict` without its fingerprint. from_dict names each new dataset by
    pickling its table with dill, which fails on some Python and pyarrow versions (a PicklingError on
    pyarrow's MonthDayNano stopped all training on a GPU machine: docs/performance.md "GPU"). Nothing
    reads that name, since our splits' caches are files we name ourselves, so a random one does."""
    import datasets
    import pyarrow as pa
    from datasets.fingerprint import generate_random_fingerprint
    from datasets.table import InMemoryTable

    table = InMemoryTable(pa.Table.from_pydict(columns, schema=features.arrow_schema))
    info = datasets.DatasetInfo(features=features)
    return datasets.Dataset(table, info=info, fingerprint=generate_random_fingerprint())


def train_tokenizers(
    tokenizer: TokenizerPlan, src_texts: Iterable[str], tgt_texts: Iterable[str], directory: Path
) -> Tokenizers | SentencePieceTokenizers:
    """The tokenizers the plan asks for (their kind, size, joint or not, the special tokens of the run's
    directions and corpora), trained on the texts; a SentencePiece model's files are written into
    `directory`."""
    tags = list(tokenizer.special)
    if tokenizer.kind == "sentencepiece":
        return train_sentencepiece(
            src_texts,
            tgt_texts,
            tokenizer.sentencepiece_type,
            tokenizer.vocab_size,
            tokenizer.joint,
            directory,
            tags=tags,
        )
    return Tokenizers.train(src_texts, tgt_texts, tokenizer.kind, tokenizer.vocab_size, tokenizer.joint, tags=tags)


def _tokenize_and_filter(
    corpus: CorpusPlan, tokenizers: Tokenizers, tags: list | None, raw: datasets.Dataset, output: Path
) -> tuple:
    """The training split's token ids, without the pairs `keep_pair` drops, written to `output` batch
    by batch. Returns the dataset and how many pairs each rule dropped. With data.directions each pair
    gets its direction's tags (`tags`: `direction_tag_ids`) after filtering: the length rules are about
    the text."""
    import datasets

    dropped = {"dropped_empty": 0, "dropped_too_long": 0, "dropped_length_ratio": 0}
    # Read once: a DictConfig attribute costs tens of microseconds, and this loop runs once per pair
    # (a fifth of the whole preparation of 50k pairs, profiled).
    max_tokens, max_ratio = int(corpus.data.max_tokens), float(corpus.data.max_length_ratio)
    indices = [column for column in (DIRECTION, CORPUS) if column in raw.column_names]  # carried through
    tagged = set(corpus.tagged)
    bt_id = tokenizers.src.token_to_id(BACK_TRANSLATION_TAG) if tagged else None
    if tagged and bt_id is None:  # a pretrained model's tokenizer, which the tag cannot join
        raise UserError(f"data.corpora: tag=true needs {BACK_TRANSLATION_TAG} in the source vocabulary, which has none")

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        kept: dict[str, list] = {"src_ids": [], "tgt_ids": [], **{column: [] for column in indices}}
        pairs = zip(tokenizers.encode_src(batch["src_text"]), tokenizers.encode_tgt(batch["tgt_text"]), strict=True)
        for row, (src, tgt) in enumerate(pairs):
            reason = keep_pair(len(src), len(tgt), max_tokens, max_ratio)
            if reason:
                dropped[reason] += 1
                continue
            if tagged and batch[CORPUS][row] in tagged:  # after the language tag, which leads as at translation
                src = [bt_id, *src]
            if tags is not None:
                src, tgt = tag_ids(src, tgt, tags[batch[DIRECTION][row]])
            for column in indices:
                kept[column].append(batch[column][row])
            kept["src_ids"].append(src)
            kept["tgt_ids"].append(tgt)
        return kept

    features = _token_features()
    for column in indices:
        features[column] = datasets.Value("int16")
    tokens = raw.map(
        encode,
        batched=True,
        batch_size=ROWS_PER_BATCH,
        remove_columns=raw.column_names,
        features=datasets.Features(features),
        cache_file_name=str(output),
        load_from_cache_file=False,
    )
    return tokens, dropped


def _direction_tags(corpus: CorpusPlan, tokenizers: Tokenizers) -> list | None:
    """Each direction's tag ids (`direction_tag_ids`) by the run's LanguageTags; None for one direction."""
    if not corpus.multilingual:
        return None
    directions = [d for d, _ in corpus.directions]
    return direction_tag_ids(language_tags(corpus.data.lang_tag, directions, tokenizers), directions)


def _pruned(corpus: CorpusPlan, tokenizers: FairseqTokenizers, raw: datasets.Dataset) -> FairseqTokenizers:
    """data.prune_vocab: the pretrained model's tokenizers cut to the ids of the training pairs `raw` (after
    cleaning), the validation pairs and the directions' language codes; a resumed run's, pruned when it
    started, as they are (its data are numbered by them)."""
    if pruned_record(tokenizers) is not None:
        return tokenizers
    valid = (text for src, tgt, _ in iter_directed_pairs(corpus.directions, "valid", {}) for text in (src, tgt))
    texts = chain(_texts(raw, "src_text"), _texts(raw, "tgt_text"), valid)
    return prune_to_corpus(tokenizers, texts, _direction_tags(corpus, tokenizers) or [], corpus.tokenizer.pretrained)


def _build(corpus: CorpusPlan, target: Path) -> None:
    import datasets

    data = corpus.data
    datasets.disable_progress_bars()  # our own log line says what is happening; tqdm is for training
    staging = target.with_name(f"{target.name}.tmp{owner()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (staging / "work").mkdir(parents=True)
        early = {"dropped_empty": 0, "dropped_too_long": 0}
        multilingual = corpus.multilingual
        read: dict[str, int] = {}
        cleaning = CleaningReport()
        # data.streaming: the alignment rule's scorers learnt on this head are kept on the plan, and
        # training's passes judge by them rather than learn them again (the cached mode's build is its
        # only pass)
        scorers = corpus.alignment if data.streaming else None
        if data.streaming:  # the head is all that is read before training: sides that do not pair up, now
            for stream in corpus.streams:
                check_equal_sides(stream)
        if data.streaming and corpus.corpus_names:  # the head of the corpora interleaved, not the first corpus alone
            lines = corpus.lines_of()
            rows = mixed_rows(
                corpus.streams, data.clean_settings, corpus.languages, cleaning, read, lines, scorers=scorers
            )
        else:
            rows = iter_training_rows(corpus.streams, data.clean_settings, corpus.languages, read, cleaning, scorers)
        train_pairs = drop_by_text(rows, data.max_tokens, early)
        # data.streaming: the tokenizer learns from the head of the corpus; training tokenizes the rest as it goes
        if data.streaming:
            train_pairs = islice(train_pairs, data.stream_tokenizer_pairs)
        schema = text_schema(multilingual, bool(corpus.corpus_names))
        written = _write_text(train_pairs, staging / "work" / "raw.arrow", schema)
        if data.streaming and corpus.corpus_names:  # a small corpus's few lines in the head, read on
            refuse_emptied_corpora(
                corpus.streams, data.clean_settings, corpus.languages, cleaning, lines, scorers=scorers
            )
        elif data.streaming:  # all that is read before training: a rule that emptied it says so now
            refuse_emptied_head(cleaning)
        if multilingual:
            require_every_direction(corpus.directions, "train", read)
        pairs = written + sum(early.values())  # after data.clean: its drops are in its report
        require_pairs(data, "train", pairs)
        if written == 0:
            raise UserError(f"no training pair survives filtering (data.max_tokens={data.max_tokens})")
        raw = datasets.Dataset.from_file(str(staging / "work" / "raw.arrow"))
        texts = (
            tokenizer_texts(
                corpus.streams, len(corpus.directions), max(len(corpus.corpus_names), 1), raw, ROWS_PER_BATCH
            )
            if multilingual
            else (_texts(raw, "src_text"), _texts(raw, "tgt_text"))
        )
        if corpus.tokenizer.pretrained is not None:
            tokenizers = load_pretrained_tokenizers(corpus.tokenizer.pretrained)
            if data.prune_vocab:
                tokenizers = _pruned(corpus, tokenizers, raw)
        else:  # SentencePiece's files are written where the cache publishes them (save() then copies nothing)
            tokenizers = train_tokenizers(corpus.tokenizer, *texts, staging)
        tags = _direction_tags(corpus, tokenizers)
        if data.streaming:
            train, stats = None, StreamingStats(tokenizer_pairs=written)
        else:
            train, dropped = _tokenize_and_filter(corpus, tokenizers, tags, raw, staging / "work" / "tokens.arrow")
            dropped = {reason: count + early.get(reason, 0) for reason, count in dropped.items()}
            stats = FilterStats(train_pairs=pairs, **dropped, train_kept=len(train))
        if train is not None and len(train) == 0:
            raise UserError(
                f"no training pair survives filtering (data.max_tokens={data.max_tokens}, "
                f"data.max_length_ratio={data.max_length_ratio})"
            )
        tagging = None
        if multilingual:
            read = {}
            valid_src, valid_tgt, valid_directions = unzip_directed(
                iter_directed_pairs(corpus.directions, "valid", read)
            )
            require_every_direction(corpus.directions, "valid", read)
            valid = (valid_src, valid_tgt)

            def tagging(src_ids: list, tgt_ids: list) -> tuple:
                return (*tag_directions(tags, src_ids, tgt_ids, valid_directions), valid_directions)

        else:
            valid = unzip(iter_split(data, "valid"))
            require_pairs(data, "valid", len(valid[0]))
        tokenizers.save(staging)
        if train is not None:
            train.save_to_disk(str(staging / "train"))
        _tokenize(tokenizers, *valid, tagging).save_to_disk(str(staging / "valid"))
        (staging / "stats.json").write_text(json.dumps(_stats_record(stats)))
        if any(stream.rules for stream in cleaning.streams.values()):
            cleaning.write(staging / CLEANING_FILE)
        del raw, train
        shutil.rmtree(staging / "work")
        # Publish whole or not at all: a crash mid-build leaves only a staging directory.
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(staging)  # another process published the same data first: use theirs
    except BaseException:  # an error (not a crash) leaves nothing behind
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_saved_split(directory: Path) -> pa.Table:
    """A split written by `datasets.Dataset.save_to_disk`, memory-mapped: its Arrow files (listed in
    state.json) are read with pyarrow alone, the way `datasets.load_from_disk` reads them, without
    importing `datasets` (and pandas) on every start."""
    state = json.loads((directory / "state.json").read_text())
    tables = [
        pa.ipc.open_stream(pa.memory_map(str(directory / entry["filename"]))).read_all()
        for entry in state["_data_files"]
    ]
    return pa.concat_tables(tables)


def prepare_data(
    data: DataConfig, barrier: Callable[[], None] = lambda: None, is_main: bool = True, pretrained: Path | None = None
) -> PreparedData:
    """`prepare_corpus` of the corpus `data` describes, for a caller without its plan. `pretrained`: a
    directory with a Marian model's SentencePiece tokenizers, used instead of training one."""
    return prepare_corpus(plan_corpus(data, pretrained), barrier, is_main)


def prepare_corpus(
    corpus: CorpusPlan, barrier: Callable[[], None] = lambda: None, is_main: bool = True
) -> PreparedData:
    """Tokenized splits of the planned corpus, built once and then loaded from the cache. Under DDP only
    the main process builds; the others wait at `barrier` and load what it wrote."""
    root, target = corpus.root, corpus.target
    if is_main and (swept := remove_abandoned_builds(root)):
        log.info("removed %s bytes of cache builds left by processes that were killed", f"{swept:,}")
    if is_main and target.is_dir() and (damage := _why_unreadable(target)):
        log.warning("the cached data in %s is damaged (%s): tokenizing the corpus again", target, damage)
        damaged = target.with_name(f"{target.name}.damaged{owner()}")
        target.rename(damaged)
        shutil.rmtree(damaged, ignore_errors=True)
    if is_main and not target.is_dir():
        try:
            root.mkdir(parents=True, exist_ok=True)
            moved_by = "data.cache_dir" if corpus.data.cache_dir else f"data.cache_dir or {CACHE_SETTING}"
            log.info("tokenizing the corpus (cached in %s for the next run; %s sets the folder)", target, moved_by)
            with stop_signals_raise():  # the build's staging directory, as large as the corpus, goes
                _build(corpus, target)
        except OSError as err:
            raise UserError(
                f"{root}: cannot write the tokenized data there ({err.strerror or err}); "
                "set data.cache_dir or SEQ2SEQ_CACHE to a writable directory"
            ) from err
    barrier()
    data = _load(target)
    data.corpus, data.plan = [dict(file) for file in corpus.files], corpus
    if corpus.corpus_names and data.train is not None:
        data.train.corpus_names, data.train.corpus_weights = corpus.corpus_names, corpus.corpus_weights
        if is_main:
            log.info("corpora: %s", describe_corpora(data.train))
    elif corpus.corpus_names and is_main:  # streamed: each corpus's lines, as its passes read them
        log.info("corpora (streamed; lines before cleaning): %s", describe_streamed_corpora(corpus))
    if corpus.multilingual:
        directions = [d for d, _ in corpus.directions]
        tags = language_tags(corpus.data.lang_tag, directions, data.tokenizers)
        attach_directions(data, directions, corpus.data.lang_tag, corpus.data.sampling_temperature, tags)
        if is_main:
            log.info("directions: %s", describe_directions(data.train, corpus.data.sampling_temperature))
    if is_main and data.cleaning is not None:
        log.info("cleaning (data.clean): %s", cleaning_summary(data.cleaning))
    if is_main and (pruned := pruned_record(data.tokenizers)) is not None:
        log.info(describe(pruned))
    return data


def describe_corpora(train: Split) -> str:
    """Each corpus's training pairs, its weight, and the pairs (and share) of an epoch it gives, for the log."""
    kept = np.bincount(train.corpora, minlength=len(train.corpus_names))
    return _describe_mix(train.corpus_names, kept, train.corpus_weights, "pairs")


def describe_streamed_corpora(corpus: CorpusPlan) -> str:
    """data.streaming: each stream's lines (counted as its passes count them, before cleaning drops
    any), its corpus's weight, and the lines (and share) of an epoch it reads, for the log. A stream is
    a corpus in one direction; its corpus's index is the last of the indices its rows carry."""
    lines = np.asarray(corpus.lines_of(), dtype=np.int64)
    weights = [corpus.corpus_weights[stream.extra[-1]] for stream in corpus.streams]
    return _describe_mix([stream.label for stream in corpus.streams], lines, weights, "lines")


def _describe_mix(names: Sequence[str], counts: np.ndarray, weights: Sequence[float], unit: str) -> str:
    shown = epoch_counts_by_corpus(counts, weights)
    return ", ".join(
        f"{name} {int(n):,} {unit} x {weight:g} = {int(count):,} an epoch ({count / max(shown.sum(), 1):.1%})"
        for name, n, weight, count in zip(names, counts, weights, shown, strict=True)
    )


def describe_directions(train: Split | None, temperature: float) -> str:
    """Each direction's training pairs and its share of an epoch, for the log."""
    if train is None:
        return ""
    counts = np.bincount(train.directions, minlength=len(train.direction_names)).tolist()
    weighted = weighted_direction_counts(train.directions, train.corpora, train.corpus_weights, len(counts))
    shares = direction_shares(weighted.tolist(), temperature)
    return ", ".join(
        f"{name} {count:,} pairs ({share:.1%} of an epoch)"
        for name, count, share in zip(train.direction_names, counts, shares, strict=True)
    )


def _why_unreadable(target: Path) -> str | None:
    """Why a published cache cannot be loaded (a truncated Arrow file, a garbage stats.json: a disk
    that filled up or a hand that edited it), or None; it is then built again instead of failing."""
    try:
        _load(target)
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException, UserError) as err:
        return (str(err).strip().splitlines() or [type(err).__name__])[0]
    return None


def _stats_record(stats: FilterStats | StreamingStats) -> dict[str, Any]:
    """What stats.json holds: the fields, and for a streaming cache "streaming": true."""
    record = asdict(stats)
    return {"streaming": True, **record} if isinstance(stats, StreamingStats) else record


def _read_stats(path: Path, streaming: bool) -> FilterStats | StreamingStats:
    kind = StreamingStats if streaming else FilterStats
    names = {f.name for f in fields(kind)}
    stats = json.loads(path.read_text())
    if not isinstance(stats, dict) or not names <= stats.keys():
        raise ValueError(f"stats.json lacks {', '.join(sorted(names))}")
    return kind(**{name: stats[name] for name in names})


def _load(target: Path) -> PreparedData:
    train = load_saved_split(target / "train") if (target / "train").is_dir() else None
    valid = load_saved_split(target / "valid")
    stats = _read_stats(target / "stats.json", streaming=train is None)
    return PreparedData(
        tokenizers=Tokenizers.load(target),
        train=(
            Split(
                TokenColumn.from_table(train, "src_ids"),
                TokenColumn.from_table(train, "tgt_ids"),
                directions=_index_column(train, DIRECTION),
                corpora=_index_column(train, CORPUS),
            )
            if train is not None
            else None  # data.streaming: read from the corpus files as training goes
        ),
        valid=Split(
            TokenColumn.from_table(valid, "src_ids"),
            TokenColumn.from_table(valid, "tgt_ids"),
            valid.column("src_text").to_pylist(),
            valid.column("tgt_text").to_pylist(),
            directions=_index_column(valid, DIRECTION),
        ),
        stats=stats,
        cleaning=json.loads((target / CLEANING_FILE).read_text()) if (target / CLEANING_FILE).is_file() else None,
    )


def _index_column(table: pa.Table, column: str) -> np.ndarray | None:
    """Each row's direction (or corpus) index, for a data.directions (data.corpora) cache; else None."""
    if column not in table.column_names:
        return None
    return table.column(column).to_numpy().astype(np.int64)
