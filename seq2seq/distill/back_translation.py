"""back_translate=: directions the teacher was never trained on (its zero-shot directions) that the
student learns from back-translated pairs, made once before the student trains.

For a direction x-y, a pivot language p such that the teacher was trained on p-y (whose pairs give
the targets) and on p-x (which writes the sources): each pair (p text, y text) of p-y becomes
(the teacher's p -> x translation, the same y text). The target is real text and only the source is
synthetic, as in back-translation; the source is made through the pivot rather than by the zero-shot
direction itself (Zhang et al. 2020 back-translate with the model's own y -> x, online), because the
teacher's trained p -> x writes the right language where its zero-shot y -> x mostly does not
(docs/results.md, "Zero-shot levers"). No x-y pair of the corpus is read for training or validation:
the validation pairs are made the same way from p-y's; the test pairs are the corpus's own x-y
pairs where it has them (scores only).

On a multi-way parallel corpus (Multi30k) the p side of p-y is the p side of p-x too, so the
translations are the ones distillation of p-x makes: the cache gives them once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from seq2seq.config import DataConfig, UserError, parse_direction, validate_directions
from seq2seq.data.directions import Direction


@dataclass(frozen=True)
class BackTranslated:
    direction: Direction  # x-y, what the student learns
    pivot: str  # p

    @property
    def pairs_from(self) -> Direction:
        """p-y: whose pairs give the targets (and the pivot text translated)."""
        return Direction(self.pivot, self.direction.tgt)

    @property
    def translated_by(self) -> Direction:
        """p-x: the teacher's direction that writes the sources."""
        return Direction(self.pivot, self.direction.src)


def plan(names: list[str], trained: list[Direction]) -> list[BackTranslated]:
    """Each back_translate= direction with its pivot (the first that serves, in the order of the
    teacher's directions); a direction the teacher was trained on, or one without a pivot, is a
    one-line error."""
    trained_names = [d.name for d in trained]
    planned = []
    for name in names:
        direction = Direction(*parse_direction(name, "back_translate"))
        if direction.name in trained_names:
            raise UserError(
                f"back_translate={name}: the teacher was trained on it; back-translation is for the directions"
                " it was not (its distilled pairs are the student's already)"
            )
        pivots = [
            d.src for d in trained if d.tgt == direction.tgt and Direction(d.src, direction.src).name in trained_names
        ]
        if not pivots:
            raise UserError(
                f"back_translate={name}: no pivot language p with p-{direction.src} and p-{direction.tgt} among "
                f"the teacher's directions ({', '.join(trained_names)})"
            )
        planned.append(BackTranslated(direction, pivots[0]))
    if len({p.direction for p in planned}) != len(planned):
        raise UserError(f"back_translate={names}: a direction is listed twice")
    return planned


def with_back_translated(corpus: DataConfig, planned: Sequence[BackTranslated]) -> DataConfig:
    """The student's data settings: the teacher's directions and the back-translated ones."""
    if not planned:
        return corpus
    student = dataclasses.replace(corpus, directions=[*corpus.directions, *(item.direction.name for item in planned)])
    validate_directions(student)
    return student
