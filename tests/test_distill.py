"""seq2seq-distill (seq2seq/distill/): the whole command on the built-in task, the teacher's translations
resumed after a kill and reused from the cache, n-best selection against an independent sacreBLEU
computation, and the bad inputs it refuses in one line without writing anything."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sacrebleu
from conftest import TINY_TRAIN, compose_config, distill_main
from script_module import load_script

from seq2seq.cli.distill import distill_plan, main
from seq2seq.config import DataConfig, DistillConfig, UserError, as_dict
from seq2seq.data import parallel_corpus
from seq2seq.data.builtin import reverse_task
from seq2seq.distill import translations
from seq2seq.distill.corpus import distilled_corpus
from seq2seq.distill.selection import select
from seq2seq.distill.teacher import corpus_config, read_teacher
from seq2seq.distill.translations import (
    PROGRESS,
    TRANSLATIONS,
    cache_key,
    read_translations,
    translate_cached,
)
from seq2seq.inference.loading import load
from seq2seq.inference.translator_api import one_line

TEACHER_DATA = ["data.task_train_size=120", "data.task_valid_size=12", "data.task_test_size=16"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run on the built-in task (8 updates): translations of some sort, in seconds."""
    from seq2seq.cli.train import train

    root = tmp_path_factory.mktemp("teacher")
    overrides = [*TINY_TRAIN, *TEACHER_DATA, f"data.cache_dir={root / 'cache'}"]
    with pytest.MonkeyPatch.context() as patch:  # module scope: conftest's per-test cache is not set yet
        patch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))
        train(compose_config("train", overrides), root / "run", overrides=overrides)
    return root / "run"


@pytest.fixture(scope="module")
def distilled(teacher: Path, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The whole command, once: a tiny student from the teacher."""
    root = tmp_path_factory.mktemp("distilled")
    argv = [
        f"teacher={teacher}",
        f"output={root / 'out'}",
        "student=tiny",
        "threads=1",
        "chunk_lines=50",
        "speed_lines=8",
        f"cache={root / 'cache'}",
        "train.max_steps=4",
        "train.progress=false",
    ]
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:  # module scope: no capsys; main prints the JSON
        patch.setattr(sys, "stdout", stdout)
        patch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))
        main(argv)
    return SimpleNamespace(root=root, output=root / "out", argv=argv, printed=json.loads(stdout.getvalue()))


def test_the_command_distils_trains_and_compares_on_the_built_in_task(distilled, teacher):
    result = json.loads((distilled.output / "result.json").read_text())
    assert result == distilled.printed
    for model in ("teacher", "student"):
        assert isinstance(result[model]["bleu_lowercase"], float)
        assert result[model]["lines_per_second"] > 0
        assert set(result[model]["speed"]) == {"default", "int8"}
    assert result["student"]["steps"] == 4
    # The student's training targets are the teacher's translations, as seq2seq-translate gives them.
    corpus = reverse_task(DataConfig(task_train_size=120, task_valid_size=12, task_test_size=16))
    sources = corpus["train"][0]
    translated = load(str(teacher), beam=5).translate(sources)
    expected = [(s, one_line(t)) for s, t in zip(sources, translated, strict=True) if t.strip()]
    data = distilled.output / "data"
    got = list(
        zip(
            (data / "distilled" / "train.src-tgt.src").read_text().splitlines(),
            (data / "distilled" / "train.src-tgt.tgt").read_text().splitlines(),
            strict=True,
        )
    )
    assert got == expected
    assert result["corpus"]["src-tgt"]["kept"] == len(expected)
    assert result["corpus"]["src-tgt"]["dropped_empty"] == len(sources) - len(expected)
    # ... and it is validated and tested on the original references.
    assert (data / "original" / "valid.src-tgt.tgt").read_text().splitlines() == corpus["valid"][1]
    assert (data / "original" / "test.src-tgt.tgt").read_text().splitlines() == corpus["test"][1]
    references = corpus["test"][1]
    student = load(str(distilled.output / "student"), beam=5).translate(corpus["test"][0])
    lowercase = sacrebleu.BLEU(lowercase=True).corpus_score(student, [references]).score
    assert result["student"]["bleu_lowercase"] == pytest.approx(lowercase, abs=0.01)


def test_a_finished_output_is_not_redone_and_other_settings_are_refused(distilled, capsys):
    status, out, err = distill_main(distilled.argv, capsys)
    assert status == 0 and json.loads(out) == distilled.printed
    assert "finished earlier" in err
    status, _, err = distill_main([*distilled.argv, "beam=4"], capsys)
    assert status == 2 and "beam=5" in err and "beam" in err and len(err.strip().splitlines()) == 1


def test_a_killed_student_resumes_and_a_baseline_trains_on_the_references(distilled, capsys, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(distilled.output, copy)
    (copy / "result.json").unlink()
    (copy / "student" / "distill-summary.json").unlink()  # as a run killed before it finished leaves it
    argv = [a if not a.startswith("output=") else f"output={copy}" for a in distilled.argv]
    settings = json.loads((copy / "settings.json").read_text())
    assert settings["teacher"] == [str(Path(distilled.argv[0].removeprefix("teacher=")).resolve())]
    status, out, err = distill_main([*argv, "baseline=true"], capsys)
    assert status == 0, err
    assert "student: resuming" in err and "distilled corpus made earlier" in err
    result = json.loads(out)
    assert result["student"]["steps"] == 4
    # baseline=true, given only now: the same student on the original references, as many updates.
    assert result["baseline"]["steps"] == 4 and isinstance(result["baseline"]["bleu_lowercase"], float)
    corpus = reverse_task(DataConfig(task_train_size=120, task_valid_size=12, task_test_size=16))
    assert (copy / "data" / "original" / "train.src-tgt.tgt").read_text().splitlines() == corpus["train"][1]
    from seq2seq.artifacts.checkpoint import load_checkpoint

    trained = load_checkpoint(copy / "baseline" / "checkpoints" / "last.pt")["config"]["data"]
    assert trained["train_tgt"] == str(copy / "data" / "original" / "train.src-tgt.tgt")


def test_a_finished_output_whose_teacher_weights_changed_is_refused_naming_the_file(
    distilled, teacher, tmp_path, capsys
):
    """A rerun after the teacher's best.pt was replaced by another checkpoint printed the old result.json
    ("finished earlier"): settings.json named the teacher's path, not its weights."""
    taught, copy = tmp_path / "teacher", tmp_path / "out"
    shutil.copytree(teacher, taught)
    shutil.copytree(distilled.output, copy)
    settings = json.loads((copy / "settings.json").read_text())
    settings["teacher"] = [str(taught.resolve())]  # as if distilled from the copy (the same weights)
    (copy / "settings.json").write_text(json.dumps(settings))
    argv = [f"teacher={taught}", f"output={copy}", *distilled.argv[2:]]
    result = (copy / "result.json").read_bytes()
    status, out, err = distill_main(argv, capsys)
    assert status == 0 and "finished earlier" in err  # the same weights elsewhere: the same teacher
    best = taught / "checkpoints" / "best.pt"
    (other,) = [c for c in (taught / "checkpoints").glob("step_*.pt") if c.read_bytes() != best.read_bytes()]
    shutil.copyfile(other, best)
    status, out, err = distill_main(argv, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"the teacher's are now {best.resolve()}, other weights" in err and out == ""
    assert (copy / "result.json").read_bytes() == result  # the earlier result is kept


class CountingEngine:
    """The teacher's engine, counting the lines it is asked to translate; it raises after `fail_after`
    calls, as a killed process stops."""

    def __init__(self, engine, fail_after: int | None = None) -> None:
        self.engine, self.fail_after, self.calls, self.lines = engine, fail_after, 0, 0

    def translate_nbest(self, lines, first_line_number=1):
        if self.fail_after is not None and self.calls == self.fail_after:
            raise KeyboardInterrupt
        self.calls += 1
        self.lines += len(lines)
        return self.engine.translate_nbest(lines, first_line_number=first_line_number)


def training_sources() -> list[str]:
    return reverse_task(DataConfig(task_train_size=120, task_valid_size=12, task_test_size=16))["train"][0]


def test_a_killed_translation_resumes_without_translating_a_finished_line_again(teacher, tmp_path):
    sources = training_sources()
    engine = load(str(teacher), beam=5, threads=1)
    whole = tmp_path / "whole"
    translate_cached(CountingEngine(engine), sources, whole, chunk_lines=25)

    killed = tmp_path / "killed"
    with pytest.raises(KeyboardInterrupt):
        translate_cached(CountingEngine(engine, fail_after=2), sources, killed, chunk_lines=25)
    assert json.loads((killed / PROGRESS).read_text())["lines"] == 50
    with (killed / TRANSLATIONS).open("ab") as torn:  # a chunk appended, its count not yet saved
        torn.write(b'["half a chunk"]\n["the process died here')
    again = CountingEngine(engine)
    progress = translate_cached(again, sources, killed, chunk_lines=25)
    assert again.lines == len(sources) - 50 and again.calls == 3
    assert progress.finished and progress.lines == len(sources)
    assert progress.bytes == (killed / TRANSLATIONS).stat().st_size  # the count a second kill would cut back to
    assert (killed / TRANSLATIONS).read_bytes() == (whole / TRANSLATIONS).read_bytes()
    assert [row[0] for row in read_translations(killed, len(sources))] == [
        one_line(t) for t in engine.translate(sources)
    ]


def test_a_finished_cache_whose_translations_were_edited_is_refused(teacher, tmp_path):
    """One hypothesis edited in a finished cache was used as it was (the student trained on it)."""
    sources = training_sources()
    engine = load(str(teacher), beam=5, threads=1)
    folder = tmp_path / "cache"
    translate_cached(CountingEngine(engine), sources, folder, chunk_lines=60)
    path = folder / TRANSLATIONS
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[7] = json.dumps(["ZZZ EDITED"]) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    unused = CountingEngine(None)
    with pytest.raises(UserError) as info:
        translate_cached(unused, sources, folder, chunk_lines=60)
    assert str(path) in str(info.value) and f"remove {folder}" in str(info.value)
    assert unused.calls == 0 and len(str(info.value).splitlines()) == 1
    # A cache finished before the digest was kept: recorded at its next reuse, then held to it.
    progress = json.loads((folder / PROGRESS).read_text())
    del progress["sha256"]
    (folder / PROGRESS).write_text(json.dumps(progress))
    assert translate_cached(unused, sources, folder, chunk_lines=60).finished and unused.calls == 0
    assert json.loads((folder / PROGRESS).read_text())["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_from_before_the_teachers_weights_were_recorded_gets_them_on_its_rerun(tmp_path):
    from seq2seq.distill.output import SETTINGS, check_settings

    weights = [{"file": "/runs/t/checkpoints/best.pt", "sha256": "a" * 64}]
    settings = {"teacher": ["/runs/t"], "beam": 5, "teacher_weights": weights}
    (tmp_path / SETTINGS).write_text(json.dumps({"teacher": ["/runs/t"], "beam": 5}))
    with pytest.raises(UserError, match="beam=5, not 4"):  # refused: nothing recorded
        check_settings(tmp_path, {**settings, "beam": 4})
    assert "teacher_weights" not in json.loads((tmp_path / SETTINGS).read_text())
    check_settings(tmp_path, settings)
    assert json.loads((tmp_path / SETTINGS).read_text()) == settings
    other = [{"file": "/runs/t/checkpoints/best.pt", "sha256": "b" * 64}]
    with pytest.raises(UserError, match="the teacher's are now /runs/t/checkpoints/best.pt, other weights"):
        check_settings(tmp_path, {**settings, "teacher_weights": other})


def test_finished_translations_are_reused_and_the_key_follows_their_inputs(teacher, tmp_path, caplog, monkeypatch):
    sources = training_sources()
    teacher_ = read_teacher(str(teacher))
    plan = distill_plan(
        DistillConfig(teacher=str(teacher), output=str(tmp_path / "out"), cache=str(tmp_path / "cache"), threads=1),
        [],
        [],
    )
    first = CountingEngine(load(str(teacher), beam=5, threads=1))
    first.kind, first.with_languages = "ctranslate2", lambda src, tgt: first
    translations.teacher_translations(plan.translations, first, "src-tgt", sources)
    second = CountingEngine(None)
    second.kind, second.with_languages = "ctranslate2", lambda src, tgt: second
    with caplog.at_level(logging.INFO, logger="seq2seq.distill"):
        rows, _, _ = translations.teacher_translations(plan.translations, second, "src-tgt", sources)
    assert second.calls == 0 and "reused" in caplog.text
    assert [r[0] for r in rows] == [one_line(t) for t in first.engine.translate(sources)]
    weights = translations.weight_digests(teacher_.weights)
    key = cache_key(weights, sources, {"beam": 5})[0]
    assert cache_key(weights, sources, {"beam": 4})[0] != key
    assert cache_key(weights, sources[:-1], {"beam": 5})[0] != key
    assert cache_key(weights, sources, {"beam": 5})[0] == key
    # Translations an older search made are not this search's: the search's version is in the key.
    monkeypatch.setattr(translations, "SEARCH_VERSION", translations.SEARCH_VERSION - 1)
    assert cache_key(weights, sources, {"beam": 5})[0] != key


@pytest.mark.parametrize("metric", ["chrf", "bleu"])
def test_nbest_selection_keeps_the_hypothesis_sacrebleu_scores_highest(teacher, metric):
    corpus = reverse_task(DataConfig(task_train_size=120, task_valid_size=12, task_test_size=16))
    sources, references = corpus["train"][0][:40], corpus["train"][1][:40]
    nbests = [[t.text for t in row] for row in load(str(teacher), beam=4, nbest=4).translate_nbest(sources)]
    score = sacrebleu.sentence_chrf if metric == "chrf" else sacrebleu.sentence_bleu
    expected = []
    for source, hypotheses, reference in zip(sources, nbests, references, strict=True):
        values = [score(h, [reference]).score for h in hypotheses]
        best = hypotheses[values.index(max(values))]
        if best.strip():
            expected.append((source, best, max(values)))
    kept = select(sources, nbests, references, metric, 0.0)
    assert list(zip(kept.sources, kept.targets, strict=True)) == [(s, t) for s, t, _ in expected]
    threshold = sorted(v for _, _, v in expected)[len(expected) // 2]  # drops about half
    dropped = select(sources, nbests, references, metric, threshold)
    assert dropped.targets == [t for _, t, v in expected if v >= threshold]
    assert dropped.dropped_low_score == sum(v < threshold for _, _, v in expected)


def test_the_corpus_and_student_must_share_the_teachers_languages_and_tokenizer(teacher):
    taught = read_teacher(str(teacher))
    with pytest.raises(UserError, match=r"data.src_lang=en: the teacher's is src"):
        corpus_config(taught, ["data.src_lang=en"])
    with pytest.raises(UserError, match=r"data.tokenizer=sentencepiece: the teacher's is bpe"):
        corpus_config(taught, ["data.tokenizer=sentencepiece"])
    assert corpus_config(taught, ["data.max_tokens=40"]).max_tokens == 40


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["data.src_lang=fr"], "data.src_lang=fr: the teacher's is src"),
        (["data.src_lang=no"], "data.src_lang=no: the teacher's is src"),  # Norwegian: it said False
        (["data.tokenizer=unigram"], "data.tokenizer=unigram: the teacher's is bpe"),
        (["data.nope=1"], "data.nope"),
        (["train.data.max_tokens=10"], "train.data.max_tokens: cannot be set here (give data.max_tokens=)"),
        (["train.max_stepz=3"], "train.max_stepz"),
        # the student's training keys were named without train.: "config error: max_steps=-1: ..."
        (["train.max_steps=-1"], "config error: train.max_steps=-1: must be positive or null"),
        (["train.model.d_model=-8"], "config error: train.model.d_model=-8: must be positive"),
        (["data.max_tokens=0"], "config error: data.max_tokens=0: must be positive"),
        (["student=huge"], "student=huge: no such model preset"),
        (["nbest=3"], "nbest=3: needs select=chrf or select=bleu"),
        (["select=ter"], "select='ter': must be one of none, chrf, bleu"),
        (["bogus=1"], "bogus: unknown key"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(teacher, tmp_path, capsys, extra, message):
    output = tmp_path / "out"
    status, _, err = distill_main([f"teacher={teacher}", f"output={output}", *extra], capsys)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not output.exists()


def test_a_teacher_that_is_no_run_is_refused(teacher, tmp_path, capsys):
    status, _, err = distill_main([f"teacher={teacher / 'ctranslate2'}", f"output={tmp_path / 'o'}"], capsys)
    assert status == 2 and "a CTranslate2 model; give a run directory" in err
    status, _, err = distill_main([f"teacher={tmp_path / 'none.pt'}", f"output={tmp_path / 'o'}"], capsys)
    assert status == 2 and "no such file or directory" in err
    assert not (tmp_path / "o").exists()


def test_a_folder_it_did_not_make_is_left_alone(teacher, tmp_path, capsys):
    output = tmp_path / "mine"
    output.mkdir()
    (output / "notes.txt").write_text("keep me")
    status, _, err = distill_main([f"teacher={teacher}", f"output={output}"], capsys)
    assert status == 2 and "holds files seq2seq-distill did not write" in err
    assert sorted(p.name for p in output.iterdir()) == ["notes.txt"]
    assert (output / "notes.txt").read_text() == "keep me"


def test_each_direction_of_a_multilingual_teacher_is_distilled_with_its_tag(multilingual_run, tmp_path, monkeypatch):
    teacher_ = read_teacher(str(multilingual_run.path))
    corpus = corpus_config(teacher_, [])
    cfg = DistillConfig(
        teacher=str(multilingual_run.path), output=str(tmp_path), cache=str(tmp_path / "c"), check_language=False
    )
    held_out = parallel_corpus.held_out(corpus)
    hashed, digest = [], translations.file_digest

    def counting_digest(path):
        hashed.append(path)
        return digest(path)

    monkeypatch.setattr(translations, "file_digest", counting_digest)
    selection = distilled_corpus(distill_plan(cfg, [], []), tmp_path / "data")
    assert sorted(selection) == ["de-en", "en-de", "en-fr"]
    # The teacher's weights hashed once, for the folder's settings and all three directions' keys alike.
    assert sorted(path for path in hashed if path in teacher_.weights) == sorted(teacher_.weights)
    engine = load(str(multilingual_run.path), beam=5)
    for name in selection:
        src, tgt = name.split("-")
        sources = (multilingual_run.corpus / f"train.{name}.{src}").read_text().splitlines()
        expected = [one_line(t) for t in engine.with_languages(src, tgt).translate(sources) if t.strip()]
        assert (tmp_path / "data" / "distilled" / f"train.{name}.{tgt}").read_text().splitlines() == expected
    # The student reads them per direction, with the teacher's directions and tags.
    from seq2seq.distill.student import student_config

    student = student_config(teacher_, "tiny", corpus, [], tmp_path / "data", "test" in held_out)
    assert list(student.data.directions) == list(multilingual_run.cfg.data.directions)
    assert student.data.train_tgt == str(tmp_path / "data" / "distilled" / "train.{src}-{tgt}.{tgt}")


def test_an_ensemble_teacher_translates_as_seq2seq_translate_decodes_it(teacher, tmp_path):
    from seq2seq.distill import report

    checkpoints = [str(teacher / "checkpoints" / "step_4.pt"), str(teacher / "checkpoints" / "step_8.pt")]
    taught = read_teacher(",".join(checkpoints))
    assert not taught.is_run and taught.weights == [Path(c) for c in checkpoints]
    corpus = corpus_config(taught, ["data.task_train_size=30"])  # an ensemble decodes on PyTorch: fewer lines
    cfg = DistillConfig(teacher=",".join(checkpoints), output=str(tmp_path), cache=str(tmp_path / "c"), threads=1)
    distilled_corpus(distill_plan(cfg, ["data.task_train_size=30"], []), tmp_path / "data")
    sources = reverse_task(corpus)["train"][0]
    assert len(sources) == 30
    expected = [one_line(t) for t in load(checkpoints, beam=5).translate(sources) if t.strip()]
    assert (tmp_path / "data" / "distilled" / "train.src-tgt.tgt").read_text().splitlines() == expected
    measured = report.speed(taught.paths, "src-tgt", sources[:4], [1])
    assert measured["default"]["1"] > 0 and "precision=int8" in measured["int8"]["unavailable"]


def test_a_sentencepiece_teacher_gets_a_sentencepiece_student(sentencepiece_run, tmp_path, capsys):
    output = tmp_path / "out"
    argv = [f"teacher={sentencepiece_run}", f"output={output}", "student=tiny", "threads=1", "speed_lines=4"]
    status, out, err = distill_main(
        [*argv, f"cache={tmp_path / 'c'}", "train.max_steps=4", "speed_threads=[1]"], capsys
    )
    assert status == 0, err
    result = json.loads(out)
    assert result["student"]["steps"] == 4 and result["student"]["lines_per_second"] > 0
    from seq2seq.data.sentencepiece import has_sentencepiece_files

    assert has_sentencepiece_files(output / "student")


GERMAN = [
    "Ein Mann mit einem roten Hut sitzt auf einer Bank im Park.",
    "Zwei Kinder spielen am Strand mit einem großen Ball.",
    "Eine Frau liest ein Buch, während ihr Hund neben ihr schläft.",
    "Die Arbeiter bauen eine neue Brücke über den Fluss.",
]
ENGLISH = [
    "A man in a red hat is sitting on a bench in the park.",
    "Two children are playing on the beach with a big ball.",
    "A woman is reading a book while her dog sleeps beside her.",
    "The workers are building a new bridge over the river.",
]


def test_a_corpus_that_reads_as_another_language_than_the_teachers_source_is_refused(tmp_path):
    pytest.importorskip("py3langid")
    from seq2seq.distill.source_language import check_source_language

    for name, lines in (("de", GERMAN), ("en", ENGLISH)):
        (tmp_path / f"train.{name}").write_text("\n".join(lines * 5) + "\n")
    corpus = DataConfig(
        kind="parallel_files",
        src_lang="en",
        tgt_lang="de",
        train_src=str(tmp_path / "train.de"),  # the German side given as the English one
        train_tgt=str(tmp_path / "train.en"),
        valid_src=str(tmp_path / "train.de"),
        valid_tgt=str(tmp_path / "train.en"),
    )
    with pytest.raises(UserError, match=r"en-de training sources read as de \(py3langid, \d+% sure"):
        check_source_language(corpus)
    check_source_language(DataConfig(**{**as_dict(corpus), "train_src": str(tmp_path / "train.en")}))


def test_a_published_result_is_a_row_each_for_teacher_and_student(distilled, tmp_path):
    script = load_script("publish_distill")
    result = json.loads((distilled.output / "result.json").read_text())
    result["load_average_during_speed"] = [0.1, 0.2]  # as on an idle machine
    page = tmp_path / "results.md"
    page.write_text(f"# Results\n\n{script.TABLE_START}\nold\n{script.TABLE_END}\n\nafter\n")
    path = script.publish(result, tmp_path / "results", page)
    assert json.loads(path.read_text()) == result and path.name.startswith("distill_src-tgt.")
    rows = [line for line in page.read_text().splitlines() if line.startswith("| src-tgt |")]
    assert [row.split(" | ")[2] for row in rows] == ["teacher", "student (distilled)"]
    teacher_cells = rows[0].split(" | ")
    assert teacher_cells[4] == str(result["teacher"]["bleu_lowercase"])
    assert (
        teacher_cells[7]
        == f"{result['teacher']['speed']['default']['1']} / {result['teacher']['speed']['default']['2']}"
    )
    assert "old" not in page.read_text() and page.read_text().endswith("after\n")
    ensemble = {**result, "settings": {**result["settings"], "teacher": ["a.pt", "b.pt"]}}
    assert script.rows(ensemble).splitlines()[0].split(" | ")[2] == "teacher (ensemble of 2)"
    assert isinstance(result["other_threads_before_speed"], float) and result["other_threads_before_speed"] >= 0
    cores = result["machine"]["cores"]
    counted = {**result, "other_threads_before_speed": 0.0}
    assert not script.loaded({**counted, "load_average_during_speed": [1.8, 1.6]})  # the command's own work
    assert script.loaded({**counted, "other_threads_before_speed": float(cores)})  # another job's threads
    older = {key: value for key, value in result.items() if key != "other_threads_before_speed"}
    assert not script.loaded(older)  # a result without the count: the load average decides
    assert script.loaded({**older, "load_average_during_speed": [0.1, cores]})
    # reproduce.py's table of training runs leaves these files out
    assert not load_script("reproduce").in_table(result)
    assert script.publish(result, tmp_path / "results", page) == path  # the same result again: unchanged
    other = {**result, "student": {**result["student"], "bleu_lowercase": -1.0}}
    with pytest.raises(SystemExit, match=rf"^error: {re.escape(str(path))} holds another result; .*--name"):
        script.publish(other, tmp_path / "results", page)
    assert json.loads(path.read_text()) == result  # a published result is never overwritten by another
    renamed = script.publish({**other, "name": "distill_src-tgt_2.x"}, tmp_path / "results", page)
    assert json.loads(renamed.read_text())["student"]["bleu_lowercase"] == -1.0
    assert script.publish(other, tmp_path / "results", page, replace=True) == path
    assert json.loads(path.read_text()) == other


def test_a_student_no_smaller_than_its_teacher_is_pointed_out(teacher, tmp_path, caplog):
    from seq2seq.distill.student import student_config

    taught = read_teacher(str(teacher))
    corpus = corpus_config(taught, [])
    with caplog.at_level(logging.WARNING, logger="seq2seq.distill"):
        student_config(taught, "tiny", corpus, [], tmp_path, True)
    assert "student=tiny (d_model=64, ffn_dim=256" in caplog.text and "no smaller than the teacher" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="seq2seq.distill"):
        cfg = student_config(taught, "tiny", corpus, ["model.d_model=32"], tmp_path, True)
    assert cfg.model.d_model == 32 and "no smaller" not in caplog.text


def test_a_students_rows_belong_with_its_teachers_corpus(distilled, tmp_path):
    """reproduce.py on a student: it reads its teacher's held-out pairs from files in the distillation's
    folder (data.kind=parallel_files), and its rows go where the teacher's corpus's go."""
    script = load_script("reproduce")
    student = distilled.output / "student"
    assert load_checkpoint_config(student)["data"]["kind"] == "parallel_files"
    assert script.corpus_kind(student, {"kind": "parallel_files"}) == "builtin"  # the teacher's
    (tmp_path / "run").mkdir()  # a run outside any distillation: its own kind
    assert script.corpus_kind(tmp_path / "run", {"kind": "parallel_files"}) == "parallel_files"


def load_checkpoint_config(run: Path) -> dict:
    from seq2seq.artifacts.checkpoint import load_checkpoint

    return load_checkpoint(run / "checkpoints" / "last.pt")["config"]


def test_a_student_may_take_a_smaller_vocabulary_and_a_shallower_decoder(teacher, tmp_path):
    """What makes a student decode fastest (scripts/bench_student_shapes.py): fewer decoder layers and a
    smaller vocabulary than the teacher's; the tokenizer's kind stays the teacher's."""
    from seq2seq.distill.student import student_config

    taught = read_teacher(str(teacher))
    corpus = corpus_config(taught, ["data.vocab_size=280"])
    cfg = student_config(taught, "tiny", corpus, ["model.decoder_layers=1"], tmp_path, True)
    assert cfg.data.vocab_size == 280 != taught.config["data"]["vocab_size"]
    assert cfg.data.tokenizer == taught.config["data"]["tokenizer"]
    assert (cfg.model.encoder_layers, cfg.model.decoder_layers) == (2, 1)


def test_a_cache_that_is_a_file_is_one_line_naming_cache(teacher, tmp_path, capsys):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    for given in (cache, cache / "below"):
        status, _, err = distill_main([f"teacher={teacher}", f"output={tmp_path / 'o'}", f"cache={given}"], capsys)
        assert status == 2 and err.strip().splitlines() == [
            f"error: cache={given}: {cache} is not a directory; give cache= a directory"
        ]
    assert not (tmp_path / "o").exists() and cache.read_text() == "not a folder"


@pytest.mark.parametrize("full_from", [1, 4], ids=["key.json", "a chunk of translations"])
def test_a_full_cache_disk_is_one_line_naming_cache_and_leaves_no_part_of_a_file(
    teacher, tmp_path, capsys, monkeypatch, full_from
):
    import errno
    import stat

    cache = tmp_path / "cache"
    real_fsync, made_durable = os.fsync, []

    def full_disk(fd: int) -> None:  # from the Nth write made durable in the cache on, the disk is full
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(cache)) and stat.S_ISREG(os.fstat(fd).st_mode):
            made_durable.append(fd)
            if len(made_durable) >= full_from:
                raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    argv = [f"teacher={teacher}", f"output={tmp_path / 'o'}", f"cache={cache}", "threads=1", "chunk_lines=50"]
    status, _, err = distill_main(argv, capsys)
    assert status == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"error: cache={cache}: cannot keep the teacher's translations there (No space left on device); "
        "free some space or give cache= another directory (a rerun resumes what was kept)"
    )
    left = [p for p in cache.rglob("*") if p.is_file()]
    assert [p.name for p in left if p.name.endswith(".tmp")] == []  # no half-written key.json or progress.json
    translations = list(cache.rglob(TRANSLATIONS))
    assert len(translations) == (full_from > 1)
    for path in translations:  # nothing beyond what progress.json counts: 50 lines, the first chunk
        progress = json.loads((path.parent / PROGRESS).read_text())
        assert progress["lines"] == 50 and path.stat().st_size == progress["bytes"]


def test_a_folder_one_distillation_holds_is_refused_to_a_second(tmp_path):
    from seq2seq.artifacts.file_lock import held

    with held(tmp_path, "seq2seq-distill", "a distillation"):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()} seq2seq-distill\n"
        with pytest.raises(UserError, match=r"another seq2seq-distill is writing a distillation there; wait for it$"):
            with held(tmp_path, "seq2seq-distill", "a distillation"):
                pass
    with held(tmp_path, "seq2seq-distill", "a distillation"):  # free again once the first lets go
        pass


def test_a_full_output_disk_is_one_line_naming_output_and_leaves_no_part_of_a_file(
    teacher, tmp_path, capsys, monkeypatch
):
    import errno
    import stat

    output = tmp_path / "o"
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:  # every file made durable in the output folder: the disk is full
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(output)) and stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    argv = [f"teacher={teacher}", f"output={output}", f"cache={tmp_path / 'cache'}", "threads=1"]
    status, _, err = distill_main(argv, capsys)
    assert status == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        f"error: output={output}: cannot write there (No space left on device); "
        "free some space and rerun the same command: it goes on from the last step kept"
    )
    assert [p.name for p in output.rglob("*") if p.name.endswith(".tmp")] == []
