"""Which language a text is in, among a model's languages: py3langid (its model ships in its wheel; the
`serve` extra), restricted to the codes it is given, so it can only answer one of them. The server's
`source: "auto"` and /detect use it (seq2seq/serve/languages.py), and so does the off-target rate of a
multilingual model's output (scripts/reproduce.py): the share of lines not in the language asked for.
"""

from __future__ import annotations

from typing import Any


def identifier(codes: list[str]) -> Any:
    """A py3langid LanguageIdentifier over those of `codes` it knows (probabilities normalised over
    them), or None where it knows none of them (the built-in task's `src`/`tgt`). Loading takes about a
    second: callers keep it."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    found = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    known = [code for code in codes if code in found.nb_classes]
    if not known:
        return None
    found.set_languages(known)
    return found


def off_target_rate(lines: list[str], target: str, codes: list[str]) -> float | None:
    """The share of `lines` whose language, detected among `codes` (the model's languages), is not
    `target`. An empty line counts as off target: it is not in the target language either. None where
    the identifier does not know `target`, or knows no other of `codes`: there is nothing to tell apart."""
    found = identifier(codes)
    if found is None or target not in found.nb_classes or len(found.nb_classes) < 2 or not lines:
        return None
    off = sum(1 for line in lines if not line.strip() or found.classify(line)[0] != target)
    return off / len(lines)
