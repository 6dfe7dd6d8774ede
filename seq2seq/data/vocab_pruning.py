"""data.prune_vocab: a pretrained NLLB-200, M2M-100 or mBART-50 model's vocabulary cut to the ids a run
uses. NLLB's 256,206 rows serve 200 languages; a run of one pair reads a fraction of them, and the
embedding (tied to the output layer) is 262M of the 600M model's parameters, its softmax the largest
matrix product of the loss (docs/huggingface.md gives the figures).

Kept: every id the training pairs (after data.clean, before the length filters) and the validation pairs
tokenize to, the four special tokens and the language codes of the run's directions. The tokenizer
itself numbers only those ids (`FairseqVocab.order`, our id -> the model's, is shortened, so the pieces
map straight to the pruned rows and no second id map sits between them); its file fairseq_vocab.json
records them, with the model they were kept from, under "pruned". The checkpoint records the
tokenizer's fingerprint, so a pruned run is never read with another map. The weights follow
(seq2seq.artifacts.vocab_rows): the kept rows at init_from=, all rows again at the Hugging Face export.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from seq2seq.data.fairseq_vocab import FairseqTokenizers
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

BATCH = 10_000  # texts encoded at a time


def prune_to_corpus(
    tokenizers: FairseqTokenizers,
    texts: Iterable[str],
    tag_ids: Sequence[tuple[list[int], list[int]]],
    source: Path,
) -> FairseqTokenizers:
    """`tokenizers` (the model's, every id) numbering only what the run uses: the ids `texts` encode
    to, the special tokens and the language codes in `tag_ids` (each direction's source and target tag
    ids, `seq2seq.data.multilingual.direction_tag_ids`), all in `tokenizers`' numbering. `source`: the
    model's directory, recorded for the export, which takes the rows not kept from there."""
    side = tokenizers.src
    used: set[int] = set()
    texts = iter(texts)
    while batch := list(islice(texts, BATCH)):
        for encoding in side.encode_batch(batch):
            used.update(encoding.ids)
    specials = {PAD_ID, BOS_ID, EOS_ID, UNK_ID}
    codes = {i for source_ids, target_ids in tag_ids for i in (*source_ids, *target_ids)} - specials
    corpus = used - specials - codes
    record = {
        "ids": sorted(side.order[i] for i in corpus | specials | codes),  # the model's ids, in its order
        "from": str(Path(source).resolve()),
        "rows": len(side.order),  # the model's vocabulary size
        "counts": {"corpus": len(corpus), "specials": len(specials), "language_codes": len(codes)},
    }
    return tokenizers.with_pruning(record)


def pruned_record(tokenizers: Any) -> dict[str, Any] | None:
    """The pruning record of a run's tokenizers (see `prune_to_corpus`), None for any other tokenizer."""
    return getattr(tokenizers.src, "pruned", None)


def describe(record: dict[str, Any]) -> str:
    """The log's line: how many ids were kept of the model's, and why."""
    counts = record["counts"]
    return (
        f"vocabulary pruned: {record['rows']:,} -> {len(record['ids']):,} ids kept ({counts['corpus']:,} pieces of "
        f"the corpus, {counts['specials']} special tokens, {counts['language_codes']} language codes of its "
        f"directions; data.prune_vocab)"
    )
