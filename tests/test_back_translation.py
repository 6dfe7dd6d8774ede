"""seq2seq-distill back_translate=: a multilingual teacher's zero-shot directions made into training
pairs through a pivot language, checked line by line against the teacher's own translations of the
pivot side, and the directions it cannot make refused in one line."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import sys

import pytest

from seq2seq.cli.distill import distill_plan, main
from seq2seq.config import DistillConfig, UserError
from seq2seq.data.directions import Direction
from seq2seq.data.parallel_corpus import corpus_test_pairs
from seq2seq.distill.back_translation import BackTranslated, plan, with_back_translated
from seq2seq.distill.corpus import distilled_corpus, original_training_pairs
from seq2seq.distill.student import student_config
from seq2seq.distill.teacher import corpus_config, read_teacher
from seq2seq.inference.loading import load
from seq2seq.inference.translator_api import one_line

TRAINED = [Direction("en", "de"), Direction("en", "fr"), Direction("de", "en")]  # conftest's MULTILINGUAL_DIRECTIONS


def lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_each_direction_gets_a_pivot_with_both_of_its_legs_trained():
    assert plan(["de-fr", "fr-de"], TRAINED) == [
        BackTranslated(Direction("de", "fr"), "en"),
        BackTranslated(Direction("fr", "de"), "en"),
    ]
    item = plan(["de-fr"], TRAINED)[0]
    assert (item.pairs_from.name, item.translated_by.name) == ("en-fr", "en-de")


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["en-de"], "back_translate=en-de: the teacher was trained on it"),
        (["fr-en"], "back_translate=fr-en: no pivot language p with p-fr and p-en among the teacher's directions"),
        (["de-fr", "de-fr"], "a direction is listed twice"),
        (["de_fr"], "back_translate='de_fr': each entry is src-tgt"),
    ],
)
def test_a_direction_that_cannot_be_back_translated_is_one_line(names, message):
    with pytest.raises(UserError) as err:
        plan(names, TRAINED)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_back_translated_pairs_are_the_teachers_pivot_translations_beside_real_targets(multilingual_run, tmp_path):
    teacher = read_teacher(str(multilingual_run.path))
    corpus = corpus_config(teacher, [])
    cfg = DistillConfig(
        teacher=str(multilingual_run.path),
        output=str(tmp_path),
        cache=str(tmp_path / "c"),
        trained_targets="references",
        back_translate=["de-fr", "fr-de"],
        check_language=False,
    )
    planned = plan(list(cfg.back_translate), TRAINED)
    distillation = distill_plan(cfg, [], [])
    held_out = distillation.held_out
    root = tmp_path / "data"
    selection = distilled_corpus(distillation, root)
    assert sorted(selection) == ["de-en", "de-fr", "en-de", "en-fr", "fr-de"]
    engine = load(str(multilingual_run.path), beam=5)
    corpus_dir = multilingual_run.corpus
    for name, pivot_pairs, writer in (("de-fr", "en-fr", ("en", "de")), ("fr-de", "en-de", ("en", "fr"))):
        src, tgt = name.split("-")
        for split, folder in (("train", "distilled"), ("valid", "original")):
            pivot_text = lines(corpus_dir / f"{split}.{pivot_pairs}.en")
            # Independent of the command: the teacher decoding the pivot side as seq2seq-translate would.
            written = [one_line(t) for t in engine.with_languages(*writer).translate(pivot_text)]
            kept = [i for i, text in enumerate(written) if text.strip()]
            assert lines(root / folder / f"{split}.{name}.{src}") == [written[i] for i in kept]
            targets = lines(corpus_dir / f"{split}.{pivot_pairs}.{tgt}")
            assert lines(root / folder / f"{split}.{name}.{tgt}") == [targets[i] for i in kept]
        # The baseline's training files (it has no references for x-y): the distilled pairs as they are.
        original_training_pairs(distillation, root)
        for lang in (src, tgt):
            assert lines(root / "original" / f"train.{name}.{lang}") == lines(
                root / "distilled" / f"train.{name}.{lang}"
            )
        # Tested on the corpus's own x-y pairs, never trained or validated on them.
        for lang in (src, tgt):
            assert lines(root / "original" / f"test.{name}.{lang}") == lines(corpus_dir / f"test.{name}.{lang}")
        assert selection[name]["pivot"] == "en" and selection[name]["kept"] == len(
            lines(root / "distilled" / f"train.{name}.{tgt}")
        )
        # Translated for this direction (trained_targets=references distils nothing): its own time.
        assert selection[name]["teacher_seconds"] > 0 and "translations_of" not in selection[name]
    # trained_targets=references: the trained directions' pairs as the corpus has them.
    for name in ("en-de", "en-fr", "de-en"):
        for lang in name.split("-"):
            assert lines(root / "distilled" / f"train.{name}.{lang}") == lines(corpus_dir / f"train.{name}.{lang}")
    # The student learns the five, as big as its teacher with student=teacher.
    student = student_config(teacher, "teacher", with_back_translated(corpus, planned), [], root, "test" in held_out)
    assert list(student.data.directions) == ["en-de", "en-fr", "de-en", "de-fr", "fr-de"]
    assert student.model.d_model == multilingual_run.cfg.model.d_model
    assert student.model.encoder_layers == multilingual_run.cfg.model.encoder_layers


def test_translations_a_distilled_direction_made_are_reused_and_timed_once(multilingual_run, tmp_path):
    """The corpus is multi-way: en-fr's English is en-de's, so de-fr's sources are the teacher's en -> de
    translations that distilling en-de made; selection.json names them and counts their time there."""
    cfg = DistillConfig(
        teacher=str(multilingual_run.path),
        output=str(tmp_path),
        cache=str(tmp_path / "c"),
        back_translate=["de-fr"],
        check_language=False,
    )
    selection = distilled_corpus(distill_plan(cfg, [], []), tmp_path / "data")
    assert selection["de-fr"]["translations"] == selection["en-de"]["translations"]
    assert selection["de-fr"]["translations_of"] == "en-de" and selection["de-fr"]["teacher_seconds"] is None
    assert selection["en-de"]["teacher_seconds"] > 0


def test_test_pairs_that_are_missing_are_skipped_and_broken_ones_refused(multilingual_run, tmp_path):
    """A back-translated direction is scored on the corpus's own test pairs where it has them; one without
    them is trained, not tested; a test file that is there but does not pair up is the usual error."""
    corpus_dir = tmp_path / "corpus"
    shutil.copytree(multilingual_run.corpus, corpus_dir)
    template = str(corpus_dir / "test.{src}-{tgt}.{src}"), str(corpus_dir / "test.{src}-{tgt}.{tgt}")
    corpus = corpus_config(read_teacher(str(multilingual_run.path)), [])
    corpus = dataclasses.replace(corpus, test_src=template[0], test_tgt=template[1])
    planned = plan(["de-fr", "fr-de"], TRAINED)
    for lang in ("fr", "de"):
        (corpus_dir / f"test.fr-de.{lang}").unlink()
    found = corpus_test_pairs(corpus, [item.direction for item in planned])
    assert list(found) == ["de-fr"] and found["de-fr"][1] == lines(corpus_dir / "test.de-fr.fr")
    broken = corpus_dir / "test.de-fr.fr"
    broken.write_text("\n".join(lines(broken)[:-1]) + "\n")
    with pytest.raises(UserError, match="lines but .* they must pair up"):
        corpus_test_pairs(corpus, [item.direction for item in planned])


def test_the_command_trains_a_student_on_back_translated_pairs_and_scores_them(multilingual_run, tmp_path):
    output = tmp_path / "out"
    argv = [
        f"teacher={multilingual_run.path}",
        f"output={output}",
        "student=teacher",
        "trained_targets=references",
        "back_translate=[de-fr]",
        "threads=1",
        "speed_lines=4",
        "speed_threads=[1]",
        "check_language=false",  # digit "sentences" in no language
        f"cache={tmp_path / 'cache'}",
        "train.max_steps=2",
        "train.progress=false",
    ]
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stdout", stdout)
        main(argv)
    result = json.loads(stdout.getvalue())
    # The zero-shot direction is scored for both: the teacher zero-shot, the student trained on it.
    assert "de-fr" in result["teacher"]["test_by_direction"] and "de-fr" in result["student"]["test_by_direction"]
    assert result["corpus"]["de-fr"]["pivot"] == "en" and result["direction"].endswith(",de-fr")
    # A multilingual model's int8 speed is measured too (it was "unavailable": loaded without a language).
    assert set(result["teacher"]["speed"]["int8"]) == {"1"} and set(result["student"]["speed"]["int8"]) == {"1"}
    trained = json.loads((output / "student" / "distill-summary.json").read_text())
    assert trained["step"] == 2
    assert (output / "data" / "distilled" / "train.de-fr.de").is_file()
