"""scripts/reproduce.py end to end: on the built-in task in CI, on Multi30k with a 2-minute budget (slow)."""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
from conftest import MULTI30K, MULTI30K_MISSING, TINY_TRAIN
from omegaconf import OmegaConf
from py3langid.langid import MODEL_FILE, LanguageIdentifier
from script_module import load_script

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.config import DataConfig
from seq2seq.data.builtin import reverse_task
from seq2seq.data.corpus import MULTI30K_SPLITS, multi30k_file, read_lines

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "reproduce.py"
README = (
    "# A README\n\n<!-- results table: written by scripts/reproduce.py -->\nold table\n<!-- end of results table -->\n"
)


def reproduce(tmp_path: Path, experiment: str, *arguments: str) -> dict:
    (tmp_path / "README.md").write_text(README)
    command = [
        sys.executable,
        str(SCRIPT),
        experiment,
        "--run-dir",
        str(tmp_path / "run"),
        "--results",
        str(tmp_path / "results"),
        "--page",
        str(tmp_path / "README.md"),
        *arguments,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def check_scores(tmp_path: Path, result: dict, references: list[str]) -> None:
    """The scores are those of the hypotheses written, recomputed here with sacreBLEU; the tables hold them."""
    hypotheses = (tmp_path / "run" / "test.hyp").read_text().splitlines()
    assert len(hypotheses) == len(references)
    expected_bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    expected_lowercase = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    assert result["test"]["bleu"] == pytest.approx(expected_bleu, abs=0.006)
    assert result["test"]["bleu_lowercase"] == pytest.approx(expected_lowercase, abs=0.006)
    assert result["test"]["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score, abs=0.006)
    assert "case:lc" in result["test"]["bleu_lowercase_signature"]
    assert "sacremoses" in result["test"]["bleu_moses_lowercase_signature"]
    assert 0 <= result["test"]["bleu_moses_lowercase"] <= 100
    # The test set chooses nothing: the checkpoint is the one with the higher validation BLEU.
    by_checkpoint = result["valid_bleu_by_checkpoint"]
    assert {"best.pt", "averaged.pt"} <= set(by_checkpoint) <= {"best.pt", "last.pt", "averaged.pt"}
    assert by_checkpoint[result["checkpoint"]] == max(by_checkpoint.values())
    # ... and the length penalty is the one with the highest validation BLEU for that checkpoint.
    by_penalty = result["valid_bleu_by_length_penalty"]
    assert set(by_penalty) == {"0.6", "1", "1.4"} and by_penalty["1"] == by_checkpoint[result["checkpoint"]]
    assert by_penalty[f"{result['length_penalty']:g}"] == max(by_penalty.values())


def check_published(tmp_path: Path, result: dict, references: list[str]) -> None:
    check_scores(tmp_path, result, references)
    # One file per experiment, budget and CPU class; the row names the class, precision and load.
    capability = result["machine"]["cpu_capability"]
    assert result["name"].endswith("." + capability.lower())
    assert json.loads((tmp_path / "results" / f"{result['name']}.json").read_text()) == result
    assert (tmp_path / "results" / f"{result['name']}.png").read_bytes().startswith(b"\x89PNG")
    assert result["precision"] in ("fp32", "bf16") and result["load_average_during_training"] > 0
    row = (
        f"| {result['experiment']} | {capability} | {result['precision']} | {result['train_minutes']:.0f} min, "
        f"{result['steps']} updates | {result['test']['bleu']} | {result['test']['bleu_lowercase']} |"
    )
    assert row in (tmp_path / "results" / "table.md").read_text()
    readme = (tmp_path / "README.md").read_text()
    assert row in readme and "old table" not in readme and readme.startswith("# A README")


@pytest.mark.slow  # a whole built-in run (18 s); the multilingual test below scores a real run by default
def test_reproduce_on_the_builtin_task(tmp_path: Path) -> None:
    overrides = [o for o in TINY_TRAIN if not o.startswith(("max_steps", "valid_every", "save_every"))]
    result = reproduce(
        tmp_path,
        "builtin_reverse",
        "--beam",
        "2",
        *overrides,
        "data.task_test_size=30",
        "max_steps=12",
        "valid_every=4",
        "save_every=4",
    )
    assert result["steps"] == 12
    assert [update for update, _, _ in result["valid_bleu_curve"]] == [4, 8, 12]
    minutes = [m for _, m, _ in result["valid_bleu_curve"]]
    assert minutes == sorted(minutes) and 0 < minutes[-1] < 5
    assert result["beam"] == 2 and result["direction"] == "src-tgt"
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["data"]
    sources = reverse_task(OmegaConf.merge(OmegaConf.structured(DataConfig), saved))["test"][0]
    assert len(sources) == 30
    references = [" ".join(reversed(source.split())).upper() for source in sources]  # the task, restated
    check_scores(tmp_path, result, references)
    # Without --publish nothing outside the run directory is written (it used to rewrite the README's
    # table and results/ in the user's clone).
    assert not (tmp_path / "results").exists() and (tmp_path / "README.md").read_text() == README
    assert json.loads((tmp_path / "run" / "result.json").read_text()) == result
    # The allocator is the training process's (re-launched on tcmalloc when installed), not this script's.
    tcmalloc = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    wanted = tcmalloc and os.environ.get("SEQ2SEQ_ALLOCATOR") != "system" and sys.platform.startswith("linux")
    assert result["machine"]["allocator"] == ("tcmalloc" if wanted else "system")

    # Scored again without training: the load and minutes the training was measured with are kept (they
    # were lost: "not sampled", a published row's machine state gone with them).
    again = reproduce(tmp_path, "builtin_reverse", "--beam", "2", "--skip-training")
    assert again["load_average_during_training"] == result["load_average_during_training"] is not None
    assert again["train_command_minutes"] == result["train_command_minutes"] is not None
    assert again["test"] == result["test"]


def test_the_curve_and_the_recipe_choice_are_read_whatever_the_log_format(tmp_path: Path) -> None:
    # The validation curve comes from the run's TensorBoard events, as training writes them; the recipe's
    # lines are found in a log of any line prefix (a distill student's, a plain one, Hydra's).
    from seq2seq.train.reporting import Dashboard

    script = load_script("reproduce")
    clock = iter([0.0, 0.0, 0.0])
    dashboard = Dashboard(tmp_path, 0, 8, progress=False, clock=lambda: next(clock))
    for step, bleu in ((4, 1.25), (8, 3.5)):
        dashboard.scalars(step, {"valid/bleu": bleu, "valid/loss": 2.0})
    dashboard.close()
    curve = script.validation_curve(tmp_path)
    assert [(step, bleu) for step, _, bleu in curve] == [(4, 1.25), (8, 3.5)]
    assert all(0 <= minutes < 1 for _, minutes, _ in curve)
    assert script.validation_curve(tmp_path / "elsewhere") == []  # a run without events: no curve
    lines = "[INFO] recipe: d128x4 for 30 minutes on this machine: ...\n[2026-11-27 10:00:00,000][seq2seq][INFO] - recipe: close call: d256x3's ...\nnot a recipe: line\n"
    assert script.RECIPE_LINES.findall(lines) == [
        "recipe: d128x4 for 30 minutes on this machine: ...",
        "recipe: close call: d256x3's ...",
    ]


def test_only_multi30k_results_enter_the_table(tmp_path: Path) -> None:
    script = load_script("reproduce")
    machine = {"cpu_capability": "AVX2", "cores": 2, "cpu": "AMD EPYC", "torch": "2.13.0", "load_average_1min": 2.0}
    common = {
        "precision": "fp32",
        "train_minutes": 5,
        "steps": 10,
        "checkpoint": "best.pt",
        "beam": 5,
        "length_penalty": 1.0,
        "load_average_during_training": 2.0,
        "load_average_during_training_max": 2.1,
        "config_hash": "abc",
        "valid_bleu_curve": [[10, 5.0, 1.0]],
        "machine": machine,
        "test": {"bleu": 1.0, "bleu_lowercase": 1.0, "chrf": 1.0},
    }
    (tmp_path / "page.md").write_text(README)
    for name, data in [("multi30k_en_de.avx2", "multi30k"), ("builtin_reverse.avx2", "builtin")]:
        result = {**common, "name": name, "experiment": name.split(".")[0], "data": data}
        script.publish(result, tmp_path / "results", tmp_path / "page.md")
    table = (tmp_path / "results" / "table.md").read_text()
    assert "| multi30k_en_de |" in table and "builtin_reverse" not in table
    assert "builtin_reverse" not in (tmp_path / "page.md").read_text()


@pytest.mark.slow
@pytest.mark.skipif(MULTI30K is None, reason=MULTI30K_MISSING)
def test_reproduce_multi30k_in_two_minutes(tmp_path: Path) -> None:
    result = reproduce(
        tmp_path,
        "multi30k_en_de",
        "--publish",
        "--data-dir",
        str(MULTI30K),
        "--minutes",
        "2",
        "valid_every=40",
        "save_every=20",
    )
    assert 1.9 <= result["train_minutes"] <= 2.5
    assert result["direction"] == "en-de" and result["valid_bleu_curve"]
    check_published(tmp_path, result, read_lines(multi30k_file(MULTI30K, MULTI30K_SPLITS["test"], "de")))


def test_the_papers_bleu_is_on_lowercased_moses_tokens() -> None:
    """The column the Multi30k papers can be set beside: both sides cut as Moses' tokenizer.perl cuts
    them (written out by hand here), lowercased, scored on those tokens. sacreBLEU's 13a cuts "Mr." and
    keeps "don't" whole, so its lowercase score differs."""
    script = load_script("reproduce")
    hypotheses = ["Don't go, Mr. Smith!", "A man in a RED shirt."]
    references = ["Do not go, Mr Smith!", "A man in a red shirt..."]
    by_hand = (
        ["don 't go , mr. smith !", "a man in a red shirt ."],
        ["do not go , mr smith !", "a man in a red shirt ..."],
    )
    expected = sacrebleu.corpus_bleu(by_hand[0], [by_hand[1]], tokenize="none").score
    scores = script.scores(hypotheses, references, "en")
    assert scores["bleu_moses_lowercase"] == pytest.approx(expected, abs=0.006)
    assert "case:lc|eff:no|tok:none" in scores["bleu_moses_lowercase_signature"]
    assert abs(scores["bleu_lowercase"] - expected) > 1  # 13a's tokens are not Moses'


def test_the_average_ends_with_last_pt_when_training_stopped_after_the_newest_periodic_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = load_script("reproduce")
    (tmp_path / "checkpoints").mkdir()
    for step in (700, 800, 900, 1000, 1100, 1200):  # 1000+ sorts before 700 as text: numbers must order them
        (tmp_path / "checkpoints" / f"step_{step}.pt").touch()
    averaged: list[tuple[list[Path], Path]] = []
    monkeypatch.setattr(script, "average_files", lambda paths, output: averaged.append((paths, output)) or output)
    files = lambda: [p.name for p in averaged[-1][0]]  # noqa: E731
    script.average_of_the_end(tmp_path, last_step=1262)  # stopped by the clock 62 updates after step_1200
    assert files() == ["step_900.pt", "step_1000.pt", "step_1100.pt", "step_1200.pt", "last.pt"]
    assert averaged[-1][1] == tmp_path / "checkpoints" / "averaged.pt"
    script.average_of_the_end(tmp_path, last_step=1200)  # last.pt is step_1200.pt: not twice
    assert files() == ["step_800.pt", "step_900.pt", "step_1000.pt", "step_1100.pt", "step_1200.pt"]


def test_a_multilingual_run_is_scored_per_direction_with_its_tags(
    multilingual_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--skip-training on a copy of a tiny multilingual run: each direction's test split translated into
    its language and scored alone, a zero-shot direction too, and that one again through the language
    it was trained on both ways (de -> en -> fr); one table row per direction and per pivot."""
    run = tmp_path / "run"
    shutil.copytree(multilingual_run.path, run)
    (run / "train.log").write_text("[2026-11-27 10:00:00,000] validation at update 100: loss 1.0 BLEU 9.0\n")
    (tmp_path / "README.md").write_text(README)
    script = load_script("reproduce")
    monkeypatch.setattr(sys, "argv", [
        "reproduce.py", "multilingual", "--run-dir", str(run), "--skip-training", "--beam", "2",
        "--zero-shot", "de-fr", "--publish", "--results", str(tmp_path / "results"), "--page", str(tmp_path / "README.md"),
    ])  # fmt: skip
    monkeypatch.setattr(script, "plot_curve", lambda result, path: None)  # matplotlib costs seconds
    script.main()
    result = json.loads(capsys.readouterr().out)
    langid = LanguageIdentifier.from_model_file(MODEL_FILE)
    langid.set_languages(["en", "de", "fr"])
    assert result["direction"] == "en-de,en-fr,de-en" and result["zero_shot"] == ["de-fr"] and "test" not in result
    assert list(result["test_by_direction"]) == ["en-de", "en-fr", "de-en", "de-fr"]
    corpus = multilingual_run.corpus
    for name, test in result["test_by_direction"].items():
        src, tgt = name.split("-")
        references = read_lines(corpus / f"test.{name}.{tgt}")
        hypotheses = (run / f"test.{name}.hyp").read_text().splitlines()
        assert len(hypotheses) == len(references)
        assert test["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=0.006)
        # The off-target rate: py3langid, restricted to the model's languages, called here directly.
        off = sum(not h.strip() or langid.classify(h)[0] != tgt for h in hypotheses) / len(hypotheses)
        assert test["off_target"] == pytest.approx(off, abs=0.0001)
        words = " ".join(hypotheses).split()
        if name != "de-fr":  # the tiny model's zero-shot output is English: its tag is not enough to learn from
            assert sum(w[:2] == tgt for w in words) / len(words) >= 0.9, (name, hypotheses)  # the tag asked for tgt
    pivot = result["test_pivot"]["de-fr"]
    assert list(result["test_pivot"]) == ["de-fr"] and pivot["pivot"] == "en"
    references = read_lines(corpus / "test.de-fr.fr")
    hypotheses = (run / "test.de-fr.pivot-en.hyp").read_text().splitlines()
    off = sum(not h.strip() or langid.classify(h)[0] != "fr" for h in hypotheses) / len(hypotheses)
    assert pivot["off_target"] == pytest.approx(off, abs=0.0001)
    assert pivot["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=0.006)
    words = " ".join(hypotheses).split()
    assert sum(w[:2] == "fr" for w in words) / len(words) >= 0.9, hypotheses  # French, where zero-shot was not
    table = (tmp_path / "results" / "table.md").read_text()
    # Not in the table: the data is not Multi30k; the result's own .md has a row per direction.
    rows = (tmp_path / "results" / f"{result['name']}.md").read_text().splitlines()[2:]
    assert [row.split(" | ")[8] for row in rows] == [
        f"{100 * t['off_target']:.1f}%" for t in [*result["test_by_direction"].values(), pivot]
    ]
    assert [row.split(" | ")[0] for row in rows] == [
        "| multilingual (en-de)",
        "| multilingual (en-fr)",
        "| multilingual (de-en)",
        "| multilingual (de-fr, zero-shot)",
        "| multilingual (de-fr, pivot through en)",
    ]
    assert table.count("\n") == 2


def test_back_translated_directions_are_labelled_and_must_be_trained(
    multilingual_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--back-translated (a seq2seq-distill back_translate= student): its directions' rows say so, and a
    direction the run was not trained on is refused before anything is decoded."""
    script = load_script("reproduce")
    scored = {"bleu": 1.0, "bleu_lowercase": 1.0, "bleu_moses_lowercase": 1.0, "chrf": 9.0, "off_target": 0.0}
    result = {
        "experiment": "bt", "precision": "fp32", "train_minutes": 1, "steps": 2, "checkpoint": "best.pt",
        "beam": 5, "length_penalty": 1.0, "config_hash": "x", "load_average_during_training": None,
        "machine": {"cpu": "c", "cpu_capability": "AMX", "cores": 2, "torch": "t", "load_average_1min": 0.1},
        "test_by_direction": {"en-de": scored, "de-fr": scored, "fr-de": scored},
        "zero_shot": ["fr-de"], "back_translated": ["de-fr"], "test_pivot": {"de-fr": {**scored, "pivot": "en"}},
    }  # fmt: skip
    labels = [row.split(" | ")[0] for row in script.table_rows(result).splitlines()]
    assert labels == [
        "| bt (en-de)",
        "| bt (de-fr, back-translated)",
        "| bt (fr-de, zero-shot)",
        "| bt (de-fr, pivot through en)",
    ]
    run = tmp_path / "run"
    shutil.copytree(multilingual_run.path, run)
    (run / "train.log").write_text("[2026-11-27 10:00:00,000] validation at update 100: loss 1.0 BLEU 9.0\n")
    monkeypatch.setattr(sys, "argv", [
        "reproduce.py", "multilingual", "--run-dir", str(run), "--skip-training", "--back-translated", "de-fr",
    ])  # fmt: skip
    with pytest.raises(SystemExit, match="--back-translated de-fr: the run was not trained on it"):
        script.main()
    assert not (run / "result.json").exists()


def test_a_result_made_elsewhere_is_published_as_publish_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """scripts/publish_result.py: a GPU machine's reproduce.json becomes results/<name>.json and rows of
    the table; a file that is no result is one line, and writes nothing."""
    publisher = load_script("publish_result")
    monkeypatch.setattr(publisher.reproduce, "plot_curve", lambda result, path: path.write_bytes(b"png"))
    source = Path(__file__).resolve().parents[1] / "results" / "multi30k_en_de_gpu_3.5min.nvidia_h100_80gb_hbm3.json"
    given = tmp_path / "reproduce.json"
    given.write_text(source.read_text())
    (tmp_path / "README.md").write_text(README)
    results = tmp_path / "results"
    publisher.main([str(given), "--results", str(results), "--page", str(tmp_path / "README.md")])
    name = json.loads(source.read_text())["name"]
    assert json.loads((results / f"{name}.json").read_text()) == json.loads(source.read_text())
    assert capsys.readouterr().out.strip() == str(results / f"{name}.json")
    row = (results / f"{name}.md").read_text().splitlines()[2]
    assert row.startswith("| multi30k_en_de_gpu") and row in (results / "table.md").read_text()
    assert row in (tmp_path / "README.md").read_text() and "old table" not in (tmp_path / "README.md").read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"bleu": 1}')
    with pytest.raises(SystemExit, match=r"bad.json: not a result of scripts/reproduce.py \(no name, experiment"):
        publisher.main([str(bad), "--results", str(tmp_path / "other")])
    assert not (tmp_path / "other").exists()


def test_a_given_checkpoint_is_scored_without_choosing(
    multilingual_run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """--checkpoint best.pt: no validation decode chooses anything (nothing averaged, no length penalty
    tried); the test split is scored with that file at the first of --length-penalties."""
    run = tmp_path / "run"
    shutil.copytree(multilingual_run.path, run)
    (run / "train.log").write_text("[2026-11-27 10:00:00,000] validation at update 100: loss 1.0 BLEU 9.0\n")
    script = load_script("reproduce")
    monkeypatch.setattr(script, "plot_curve", lambda result, path: None)
    arguments = ["reproduce.py", "multilingual", "--run-dir", str(run), "--skip-training", "--beam", "1"]
    monkeypatch.setattr(sys, "argv", [*arguments, "--checkpoint", "best.pt", "--length-penalties", "0.6,1.0"])
    script.main()
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"] == "best.pt" and result["length_penalty"] == 0.6
    assert result["valid_bleu_by_checkpoint"] == {} and result["valid_bleu_by_length_penalty"] == {}
    assert not (run / "checkpoints" / "averaged.pt").exists()
    hypotheses = (run / "test.en-de.hyp").read_text().splitlines()
    references = read_lines(multilingual_run.corpus / "test.en-de.de")
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert result["test_by_direction"]["en-de"]["bleu"] == pytest.approx(expected, abs=0.006)
    monkeypatch.setattr(sys, "argv", [*arguments, "--checkpoint", "step_9.pt"])
    with pytest.raises(SystemExit, match=r"--checkpoint step_9\.pt: .*step_9\.pt does not exist"):
        script.main()


def test_a_rerun_that_trains_another_recipe_than_the_published_row_says_so(tmp_path: Path) -> None:
    script = load_script("reproduce")
    published = tmp_path / "multi30k_en_de_30min.amx.json"
    published.write_text(json.dumps({"recipe": "d256x3", "precision": "bf16"}))
    rerun = {"recipe": "d128x4", "precision": "fp32"}
    assert script.recipe_change(published, rerun) == (
        f"this run trained differently from {published}: recipe d256x3 -> d128x4, precision bf16 -> fp32"
    )
    assert script.recipe_change(published, {"recipe": "d256x3", "precision": "bf16"}) is None
    assert script.recipe_change(tmp_path / "never_published.json", rerun) is None


def test_the_row_keeps_how_the_recipe_was_chosen() -> None:
    log = (
        "[2026-11-28 11:41:46,170][seq2seq.train.recipe][INFO] - recipe: d128x4 for 30 minutes on this machine "
        "(timed in 9.1 s): d256x3 in bf16 at 0.60 s/update ±5%: ~2,550 updates (2,430-2,690), wants >= 3,000\n"
        "[2026-11-28 11:41:46,171][seq2seq.train.recipe][INFO] - recipe: close call: x's 1-3 updates straddle its "
        "minimum 2; a close call goes to the next candidate\n"
        "[2026-11-28 11:41:46,177][seq2seq.train.recipe][INFO] - recipe d128x4 sets model.d_model=128\n"
    )
    found = load_script("reproduce").RECIPE_LINES.findall(log)
    assert [line[:32] for line in found] == ["recipe: d128x4 for 30 minutes on", "recipe: close call: x's 1-3 upda"]
