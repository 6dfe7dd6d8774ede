"""Validation of a multilingual run (seq2seq.train.evaluate): each direction translated with its tag and
scored alone, the mean chosen on, shown per direction in the log and TensorBoard; a resume with other
directions or tags refused."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import sacrebleu
from conftest import MULTILINGUAL_DIRECTIONS, compose_config
from tensorboard.backend.event_processing.event_accumulator import DEFAULT_SIZE_GUIDANCE, EventAccumulator

from seq2seq.cli.train import train
from seq2seq.config import UserError
from seq2seq.data.pipeline import prepare_data
from seq2seq.inference.loading import load
from seq2seq.train.evaluate import score_directions, validation_translations


def language_share(lines: list[str], lang: str) -> float:
    """The share of the words of `lines` that are `lang`'s (the corpus's words are lang + digit)."""
    words = " ".join(lines).split()
    return sum(w[:2] == lang for w in words) / max(len(words), 1)


@pytest.fixture(scope="module")
def validated(multilingual_run):
    """The final weights' validation translations, as the Trainer's greedy translator makes them."""
    translator = load(str(multilingual_run.path), engine="torch", beam=1, batch_size=64, device="cpu", precision="fp32")
    data = prepare_data(multilingual_run.cfg.data)
    return validation_translations(translator, data.valid, None), data


def test_each_direction_is_translated_into_its_target_language(validated):
    results, data = validated
    assert list(results) == MULTILINGUAL_DIRECTIONS
    rows = data.valid.direction_rows()
    for name, (sources, hypotheses, references) in results.items():
        src, tgt = name.split("-")
        assert sources == [data.valid.src_text[i] for i in rows[name]]
        assert references == [data.valid.tgt_text[i] for i in rows[name]]
        assert language_share(sources, src) == 1.0
        # Untagged, en-de and en-fr would get the same output: the tag makes each write its language.
        assert language_share(hypotheses, tgt) >= 0.9, (name, hypotheses)


def test_scores_are_each_direction_s_and_their_mean(validated, multilingual_run):
    results, _ = validated
    metrics = score_directions(results)
    for name, (_, hypotheses, references) in results.items():
        assert metrics[f"bleu/{name}"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
        assert metrics[f"chrf/{name}"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    for key in ("bleu", "chrf", "accuracy"):
        assert metrics[key] == pytest.approx(np.mean([metrics[f"{key}/{n}"] for n in MULTILINGUAL_DIRECTIONS]))
    # The run's own final validation scored the same translations (its final weights are model/).
    final = multilingual_run.summary["metrics"]
    for key, value in metrics.items():
        assert final[key] == pytest.approx(value), key


def test_log_and_tensorboard_show_every_direction_and_best_follows_the_mean(multilingual_run):
    lines = [line for line in multilingual_run.lines if line.startswith("validation at update")]
    assert len(lines) == 2
    for name in MULTILINGUAL_DIRECTIONS:
        assert all(f" {name} " in line for line in lines)
    events = EventAccumulator(
        str(multilingual_run.path / "tb"), size_guidance={kind: 0 for kind in DEFAULT_SIZE_GUIDANCE}
    ).Reload()
    scalars = lambda tag: [e.value for e in events.Scalars(tag)]  # noqa: E731
    each = np.array([scalars(f"valid/bleu/{name}") for name in MULTILINGUAL_DIRECTIONS])  # (directions, validations)
    assert each.shape == (3, 2)
    np.testing.assert_allclose(scalars("valid/bleu"), each.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(scalars("valid/best_bleu"), np.maximum.accumulate(each.mean(axis=0)), rtol=1e-5)
    assert multilingual_run.summary["best"]["value"] == pytest.approx(each.mean(axis=0).max(), rel=1e-5)


@pytest.mark.parametrize(
    ("override", "key"),
    [("data.lang_tag=decoder_start", "lang_tag"), ("data.directions=[en-de,en-fr]", "directions")],
)
def test_a_resume_with_other_directions_or_tags_is_refused(multilingual_run, tmp_path, override, key):
    run = tmp_path / "run"
    shutil.copytree(multilingual_run.path, run)
    overrides = [f"resume={run}", override, "max_steps=101"]
    with pytest.raises(UserError, match=rf"resume: data\.{key}=.* differs from the checkpoint's data\.{key}="):
        train(compose_config("train", overrides), run, overrides=overrides)
