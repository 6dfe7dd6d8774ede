"""scripts/back_translate.py: the reverse model's direction checked, its translations written as a
corpus, cached and resumed as seq2seq-distill's are, and the user's files left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config, digit_sentence
from script_module import load_script

from seq2seq.config import UserError
from seq2seq.distill.teacher import Teacher


def test_a_model_of_another_direction_is_refused_in_one_line():
    script = load_script("back_translate")
    teacher = Teacher(["runs/x"], [], {"data": {"src_lang": "en", "tgt_lang": "de", "directions": None}})
    script.model_direction(Teacher(["runs/x"], [], {"data": {"src_lang": "de", "tgt_lang": "en"}}), "en", "de")
    with pytest.raises(UserError, match="--model runs/x: translates en-de, not de-en; .* needs a de-en model"):
        script.model_direction(teacher, "en", "de")
    multilingual = Teacher(["runs/m"], [], {"data": {"src_lang": "x", "tgt_lang": "y", "directions": ["en-de"]}})
    with pytest.raises(UserError, match="translates en-de, not fr-en"):
        script.model_direction(multilingual, "en", "fr")


def test_pairs_already_there_are_not_written_over(tmp_path):
    script = load_script("back_translate")
    (tmp_path / "train.en").write_text("mine\n")
    with pytest.raises(UserError, match="train.en: exists and was not written by this back-translation"):
        script.check_output(tmp_path, ["train.en", "train.de"], "key")


@pytest.mark.slow  # trains the session's multilingual run when no other test has
def test_monolingual_german_becomes_a_corpus_and_a_second_run_reads_the_cache(multilingual_run, tmp_path, monkeypatch):
    script = load_script("back_translate")
    mono = tmp_path / "mono.de"
    lines = [digit_sentence("de", 50_000 + i) for i in range(12)]
    mono.write_text("\n".join(lines) + "\n")
    argv = ["--model", str(multilingual_run.path), "--input", str(mono), "--src", "en", "--tgt", "de"]
    argv += ["--out", str(tmp_path / "bt"), "--cache", str(tmp_path / "cache"), "--chunk-lines", "5", "--beam", "2"]
    argv.append("--no-language-check")  # "de3 de0 ..." is the toy run's German, not py3langid's
    script.main(argv)
    sources = (tmp_path / "bt" / "train.en").read_text().splitlines()
    assert (tmp_path / "bt" / "train.de").read_text().splitlines() == lines  # the real text, as it was
    assert len(sources) == 12 and sum(s.startswith("en") for s in sources) >= 10  # English, from the de-en model
    progress = json.loads(next((tmp_path / "cache").glob("*/progress.json")).read_text())
    assert progress["lines"] == 12 and progress["finished"]
    calls = []
    monkeypatch.setattr(script, "engine_for", lambda *a: calls.append(a) or _NoTranslation())
    script.main(argv)  # the same model, lines and settings: from the cache, nothing translated
    assert (tmp_path / "bt" / "train.en").read_text().splitlines() == sources


class _NoTranslation:
    def with_languages(self, *languages: str) -> _NoTranslation:
        return self

    def translate_nbest(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("a cached back-translation was translated again")


# ---- bad input, refused in one line before anything is translated or written --------------------

GERMAN = [
    "Ein Mann mit einem orangefarbenen Hut starrt auf etwas.",
    "Zwei junge Männer stehen neben einem Auto auf der Straße.",
    "Eine Frau sitzt mit ihrem Hund auf einer Bank im Park.",
    "Kinder spielen am Nachmittag im Garten hinter dem Haus.",
] * 5
ENGLISH = [
    "A man in an orange hat starring at something.",
    "Two young men are standing next to a car on the street.",
    "A woman sits on a bench in the park with her dog.",
    "Children are playing in the garden behind the house in the afternoon.",
] * 5


def test_monolingual_text_in_another_language_is_refused_in_one_line():
    script = load_script("back_translate")
    script.input_language(GERMAN, "de", "mono.de")
    with pytest.raises(
        UserError, match=r"^--input mono.de: reads as en \(py3langid, \d+% sure, first 200 lines\), not de"
    ):
        script.input_language(ENGLISH, "de", "mono.de")
    script.input_language(ENGLISH, "tgt", "mono.tgt")  # a run that never named its languages: nothing to compare


def test_the_wrong_language_stops_the_script_before_the_model_is_loaded(tmp_path, monkeypatch):
    script = load_script("back_translate")
    reverse = Teacher(["runs/de-en"], [tmp_path / "weights"], {"data": {"src_lang": "de", "tgt_lang": "en"}})
    monkeypatch.setattr(script, "read_teacher", lambda spec, given_as: reverse)
    monkeypatch.setattr(script, "engine_for", lambda *a: pytest.fail("the model was loaded"))
    mono = tmp_path / "mono.de"
    mono.write_text("\n".join(ENGLISH) + "\n")
    argv = ["--model", "runs/de-en", "--input", str(mono), "--src", "en", "--tgt", "de"]
    argv += ["--out", str(tmp_path / "bt"), "--cache", str(tmp_path / "cache")]
    with pytest.raises(SystemExit, match=r"^error: --input .*mono.de: reads as en"):
        script.main(argv)
    assert not (tmp_path / "bt").exists() and not (tmp_path / "cache").exists()


def test_a_model_beside_another_run_s_tokenizer_is_refused_before_translating(tmp_path):
    from seq2seq.cli.train import train
    from seq2seq.data.tokenizer import Tokenizers

    overrides = [*TINY_TRAIN, "max_steps=2", "valid_every=2", "save_every=2", f"data.cache_dir={tmp_path / 'cache'}"]
    train(compose_config("train", overrides), tmp_path / "run")
    other = Tokenizers.train(["zebra quartz jumps"] * 50, ["ZEBRA QUARTZ JUMPS"] * 50, "bpe", 280, True)
    replaced = [path.parent for path in (tmp_path / "run").rglob("tokenizer*.json")]
    assert replaced
    for folder in replaced:
        other.save(folder)
    mono = tmp_path / "mono.txt"
    mono.write_text("a b c\nd e f\n")
    # The built-in task translates src -> tgt: the reverse model of a tgt -> src run.
    argv = ["--model", str(tmp_path / "run"), "--input", str(mono), "--src", "tgt", "--tgt", "src"]
    argv += ["--out", str(tmp_path / "bt"), "--cache", str(tmp_path / "bt-cache"), "--device", "cpu"]
    # PyTorch's engine checks the checkpoint's vocabulary record, CTranslate2's its export's vocabulary files
    mismatch = r"^error: .*(belong to different runs|not the tokenizer's beside it, in the same order .*)$"
    with pytest.raises(SystemExit, match=mismatch):
        load_script("back_translate").main(argv)
    assert not (tmp_path / "bt").exists() and not (tmp_path / "bt-cache").exists()


def test_the_process_is_set_up_before_torch_loads():
    """The script set up its process only when seq2seq.inference was imported, after seq2seq.distill had
    imported torch: its log said "torch was imported before the command set up the process, so OpenMP's
    threads spin long", and on a shared machine they took the cores from the other work."""
    probe = (
        "import sys; from script_module import load_script; load_script('back_translate'); "
        "from seq2seq import cpu_sharing, startup; "
        "print(startup._prepared, cpu_sharing._openmp_loaded_first)"
    )
    tests = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-c", probe], cwd=tests, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False"]


# ---- monolingual text of any size: read and written a chunk at a time, resumed where it stopped ------


class _Reverser:
    """A stand-in for the reverse model: each line's words backwards; `stop_after` chunks, then a kill.
    `chunks`: each call's first line number and (`record`) its lines."""

    def __init__(self, stop_after: int | None = None, record: bool = True) -> None:
        self.chunks: list[tuple[int, list[str]]] = []
        self.stop_after, self.record = stop_after, record

    def with_languages(self, *languages: str) -> _Reverser:
        return self

    def translate_nbest(self, lines: list[str], first_line_number: int = 1) -> list:
        from types import SimpleNamespace

        if self.stop_after is not None and len(self.chunks) == self.stop_after:
            raise KeyboardInterrupt
        self.chunks.append((first_line_number, list(lines) if self.record else []))
        return [[SimpleNamespace(text=" ".join(reversed(line.split())))] for line in lines]


def german(n: int) -> list[str]:
    return [f"Satz Nummer {i} mit einigen deutschen Wörtern darin" for i in range(n)]


def back_translate_with(script, tmp_path: Path, name: str, lines: list[str], engine: _Reverser, monkeypatch) -> None:
    reverse = Teacher(["runs/de-en"], [tmp_path / "weights"], {"data": {"src_lang": "de", "tgt_lang": "en"}})
    (tmp_path / "weights").write_bytes(b"w")
    monkeypatch.setattr(script, "read_teacher", lambda spec, given_as: reverse)
    monkeypatch.setattr(script, "engine_for", lambda *a: engine)
    mono = tmp_path / f"{name}.de"
    if not mono.exists():
        mono.write_text("".join(line + "\n" for line in lines))
    argv = ["--model", "runs/de-en", "--input", str(mono), "--src", "en", "--tgt", "de", "--chunk-lines", "100"]
    script.main([*argv, "--out", str(tmp_path / name), "--cache", str(tmp_path / "cache"), "--no-language-check"])


def test_a_back_translation_holds_a_chunk_not_the_monolingual_text(tmp_path, monkeypatch):
    import tracemalloc

    script = load_script("back_translate")
    peaks = []
    for n in (2_000, 20_000):
        (tmp_path / f"bt{n}.de").write_text("".join(line + "\n" for line in german(n)))  # written before the count
        tracemalloc.start()
        back_translate_with(script, tmp_path, f"bt{n}", [], _Reverser(record=False), monkeypatch)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert (tmp_path / f"bt{n}" / "train.de").read_text().splitlines() == german(n)  # as they were
        written = (tmp_path / f"bt{n}" / "train.en").read_text().splitlines()
        assert written == [" ".join(reversed(line.split())) for line in german(n)]
    # Ten times the lines: the lists of them (held before) would take megabytes more
    assert peaks[1] < peaks[0] + 300_000, peaks


def test_a_killed_back_translation_resumes_at_its_next_chunk(tmp_path, monkeypatch):
    script = load_script("back_translate")
    lines = german(450)
    killed = _Reverser(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        back_translate_with(script, tmp_path, "bt", lines, killed, monkeypatch)
    assert not (tmp_path / "bt" / "train.en").exists()
    resumed = _Reverser()
    back_translate_with(script, tmp_path, "bt", lines, resumed, monkeypatch)
    # Each line translated once, in chunks that start where the killed run stopped
    assert [start for start, _ in killed.chunks + resumed.chunks] == [1, 101, 201, 301, 401]
    assert [line for _, chunk in killed.chunks + resumed.chunks for line in chunk] == lines
    assert (tmp_path / "bt" / "train.en").read_text().splitlines() == [" ".join(reversed(s.split())) for s in lines]
    assert (tmp_path / "bt" / "train.de").read_text().splitlines() == lines


def test_a_model_that_is_not_a_run_or_checkpoints_is_named_as_the_flag_the_user_gave(tmp_path):
    script = load_script("back_translate")
    missing = tmp_path / "a.pt"
    with pytest.raises(UserError, match=rf"^--model {missing},{missing}: {missing}: no such file or directory; "):
        script.read_teacher(f"{missing},{missing}", given_as="--model ")
    mono = tmp_path / "mono.de"
    mono.write_text("Ein Mann.\n")
    argv = ["--model", str(missing), "--input", str(mono), "--src", "en", "--tgt", "de", "--out", str(tmp_path / "bt")]
    with pytest.raises(SystemExit, match=rf"^error: --model {missing}: "):  # the command's one line
        script.main(argv)
    assert not (tmp_path / "bt").exists()


def test_an_ensemble_of_checkpoints_is_loaded_as_one_reverse_model(monkeypatch):
    """--model a.pt,b.pt: every checkpoint goes to the engine, which averages their predictions (as
    seq2seq-translate's checkpoint=a,b); one path is loaded as itself."""
    script = load_script("back_translate")
    loaded = []
    monkeypatch.setattr(script, "load", lambda paths, **kwargs: loaded.append((paths, kwargs)))
    args = type("Args", (), {"batch_size": 8, "threads": 1, "device": "cpu"})()
    beam = {"sampling": False, "beam": 5, "length_penalty": 1.0}
    script.engine_for(Teacher(["/r/a.pt", "/r/b.pt"], [], {}), beam, args)
    script.engine_for(Teacher(["/r/a.pt"], [], {}), beam, args)
    assert [paths for paths, _ in loaded] == [["/r/a.pt", "/r/b.pt"], "/r/a.pt"]
    assert loaded[0][1] == {"batch_size": 8, "threads": 1, "device": "cpu", "beam": 5, "length_penalty": 1.0}
