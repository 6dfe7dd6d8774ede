"""Whether the corpus's source side is in the teacher's source language, by its text: a corpus of another
language named with the teacher's codes (data.train_src= pointing at the wrong file) would otherwise be
translated for hours into nonsense. py3langid (the `serve` extra) reads the first lines; without it, or
for a code it does not know (the built-in task's "src"), nothing is checked."""

from __future__ import annotations

import importlib.util
import itertools
import logging

from seq2seq.config import DataConfig, UserError
from seq2seq.data.corpus import iter_split
from seq2seq.data.directions import each_direction
from seq2seq.inference.target_language import UNNAMED

log = logging.getLogger("seq2seq.distill")
SAMPLE_LINES = 200  # joined into one text: py3langid is sure of a language from far fewer
SURE = 0.9  # the probability of another language at which the corpus is refused


def check_source_language(corpus: DataConfig) -> None:
    """Each direction's first training sources, identified; a one-line UserError when they read as
    another language than the direction's source, with that probability at least SURE."""
    if importlib.util.find_spec("py3langid") is None:
        return
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = None
    for direction, one in each_direction(corpus):
        expected = direction.src.partition("_")[0]
        pairs = iter_split(one, "train")
        if pairs is None or expected in UNNAMED:  # a run that never named its languages: nothing to compare
            continue
        if identifier is None:
            identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if expected not in identifier.nb_classes:
            continue
        text = "\n".join(source for source, _ in itertools.islice(pairs, SAMPLE_LINES))
        found, probability = identifier.classify(text)
        if found != expected and probability >= SURE:
            raise UserError(
                f"the corpus's {direction.name} training sources read as {found} (py3langid, {probability:.0%} sure, "
                f"first {SAMPLE_LINES} lines), not {expected}, the teacher's source language; check data.* "
                "(check_language=false if they are right)"
            )
