"""Which engine seq2seq-translate decodes with (seq2seq/inference/choice.py): the run's CTranslate2
export wherever it decodes as PyTorch would, PyTorch for everything else, a forced engine that cannot
do what was asked is one line naming the key. The run directories here are small stand-in files: the
rule reads only names, a checkpoint's zip directory and the record inside the export."""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from seq2seq import cpuinfo
from seq2seq.artifacts.freshness import checkpoint_record
from seq2seq.artifacts.path_kind import DECODING_FILE
from seq2seq.config import TranslateConfig, UserError
from seq2seq.data.tokenizer import Tokenizers
from seq2seq.inference import ctranslate2_engine, int8_probe, resolved_model
from seq2seq.inference.choice import EngineChoice, choose_engine
from seq2seq.inference.ctranslate2_engine import probe_loader
from seq2seq.inference.job import decoding_job
from seq2seq.inference.loading import load_engine
from seq2seq.inference.translator_api import TranslatorAPI


def resolved_choice(cfg: TranslateConfig) -> EngineChoice:
    return choose_engine(decoding_job(cfg))


def resolved_engine(cfg: TranslateConfig) -> TranslatorAPI:
    return load_engine(decoding_job(cfg))


def save_zip(path: Path, step: int) -> None:
    """A stand-in for a checkpoint (torch.save writes a zip), its content depending on `step`."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", f"step {step}")


def make_run(root: Path, stale: bool = False) -> Path:
    """A run with checkpoints/best.pt and ctranslate2/ made from it (`stale`: from an earlier best.pt)."""
    (root / "checkpoints").mkdir(parents=True)
    (root / "ctranslate2").mkdir()
    best = root / "checkpoints" / "best.pt"
    save_zip(best, 10)
    (root / "ctranslate2" / "model.bin").write_bytes(b"")
    record = DECODING_FILE
    (root / "ctranslate2" / record).write_text(json.dumps({"max_positions": 256, **checkpoint_record(best, 10)}))
    if stale:  # resumed and stopped before its end: a new best.pt, the export of the old one
        save_zip(best, 20)
    return root


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """ctranslate2 installed, on a CPU without bf16 instructions (where PyTorch's auto precision is fp32)."""
    monkeypatch.setattr(resolved_model, "ctranslate2_installed", lambda: True)
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: False)
    # The runs here are empty files: what a measurement would time is given, equal for every engine.
    monkeypatch.setattr(int8_probe, "measure_engines", lambda c, load: int8_probe.Timing(dict.fromkeys(c, 1.0)))


@pytest.mark.usefixtures("installed")
def test_a_run_with_a_current_export_decodes_with_ctranslate2(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    for settings in (dict(), dict(beam=1), dict(beam=4), dict(prefix=True, beam=1), dict(precision="fp32")):
        choice = resolved_choice(TranslateConfig(run=str(run), **settings))
        assert (choice.engine, choice.model) == ("ctranslate2", str(run / "ctranslate2")), settings
    assert resolved_choice(TranslateConfig(run=str(run), engine="torch")).engine == "torch"


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(
    ("settings", "why"),
    [
        (dict(sampling=True), "sampling=true"),
        (dict(beam=4, nbest=2), "nbest>1"),
        (dict(prefix=True, beam=2), "prefix=true with beam>1"),
        (dict(attention="plots"), "attention="),
        (dict(precision="bf16"), "precision=bf16"),
        (dict(checkpoint="best.pt"), "checkpoint= is a PyTorch checkpoint"),
        (dict(checkpoint="a.pt,b.pt"), "checkpoint= is a PyTorch checkpoint"),
    ],
)
def test_what_ctranslate2_would_decode_differently_stays_on_pytorch(tmp_path: Path, settings: dict, why: str) -> None:
    run = make_run(tmp_path / "run")
    choice = resolved_choice(TranslateConfig(run=str(run), **settings))
    assert choice.engine == "torch" and choice.why.startswith(why), choice
    with pytest.raises(UserError, match=rf"^config error: engine=ctranslate2: {why}"):
        resolved_choice(TranslateConfig(run=str(run), engine="ctranslate2", **settings))


@pytest.mark.usefixtures("installed")
def test_an_export_of_another_checkpoint_or_missing_is_not_used(tmp_path: Path) -> None:
    stale = make_run(tmp_path / "stale", stale=True)  # a resumed run stopped before its end
    choice = resolved_choice(TranslateConfig(run=str(stale)))
    assert choice.engine == "torch" and choice.why == (
        f"{stale / 'ctranslate2'} was made from update 10 of another checkpoint than "
        f"{stale / 'checkpoints' / 'best.pt'} (a resumed run stopped before its end)"
    )
    missing = make_run(tmp_path / "missing")
    (missing / "ctranslate2" / "model.bin").unlink()
    choice = resolved_choice(TranslateConfig(run=str(missing)))
    assert choice.engine == "torch" and choice.why.endswith("(training writes it when ctranslate2 is installed)")
    with pytest.raises(UserError, match=r"^config error: engine=ctranslate2: .*stale/ctranslate2 was made from update"):
        resolved_choice(TranslateConfig(run=str(stale), engine="ctranslate2"))


@pytest.mark.usefixtures("installed")
def test_a_stale_export_copied_after_its_checkpoint_is_still_stale(tmp_path: Path) -> None:
    # Judged by modification times, `cp -r run copy` (no -p) made a stale export look current: run=copy
    # decoded 200/200 lines differently from best.pt. And a current one stays current when copied.
    stale, current = make_run(tmp_path / "stale", stale=True), make_run(tmp_path / "current")
    for run in (stale, current):
        copy = tmp_path / f"{run.name}-copy"
        (copy / "checkpoints").mkdir(parents=True)
        (copy / "checkpoints" / "best.pt").write_bytes((run / "checkpoints" / "best.pt").read_bytes())
        shutil.copytree(run / "ctranslate2", copy / "ctranslate2", copy_function=shutil.copy)  # new times
        assert (copy / "ctranslate2" / "model.bin").stat().st_mtime >= (
            copy / "checkpoints" / "best.pt"
        ).stat().st_mtime
        engine_of_copy = resolved_choice(TranslateConfig(run=str(copy))).engine
        assert engine_of_copy == ("torch" if run is stale else "ctranslate2")


@pytest.mark.usefixtures("installed")
def test_an_export_that_does_not_record_its_checkpoint_is_not_used(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    for record in ('{"max_positions": 256}', "garbage", ""):
        (run / "ctranslate2" / DECODING_FILE).write_text(record)
        choice = resolved_choice(TranslateConfig(run=str(run)))
        assert (choice.engine, choice.why) == (
            "torch",
            f"{run / 'ctranslate2'} does not record the checkpoint it was made from",
        )


def test_without_the_package_a_run_decodes_with_pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolved_model, "ctranslate2_installed", lambda: False)
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: False)
    choice = resolved_choice(TranslateConfig(run=str(make_run(tmp_path / "run"))))
    assert choice.engine == "torch" and "pip install 'seq2seq[export]'" in choice.why


def test_an_export_given_as_checkpoint_is_decoded_by_ctranslate2_and_a_stale_one_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = make_run(tmp_path / "run", stale=True)
    choice = resolved_choice(TranslateConfig(checkpoint=str(run / "ctranslate2")))
    assert (choice.engine, choice.model) == ("ctranslate2", str(run / "ctranslate2"))
    assert [r.getMessage() for r in caplog.records] == [
        f"{run / 'ctranslate2'} was made from update 10 of another checkpoint than {run / 'checkpoints' / 'best.pt'} "
        "(a resumed run stopped before its end): it decodes that model"
    ]
    with pytest.raises(UserError, match=r"^config error: engine=torch: checkpoint=.* is a CTranslate2 model$"):
        resolved_choice(TranslateConfig(checkpoint=str(run / "ctranslate2"), engine="torch"))


def test_ctranslate2_devices_follow_ours() -> None:
    assert ctranslate2_engine._device("auto", cuda_devices=0) == ("cpu", 0)
    assert ctranslate2_engine._device("auto", cuda_devices=2) == ("cuda", 0)
    assert ctranslate2_engine._device("cuda:1", cuda_devices=2) == ("cuda", 1)
    assert ctranslate2_engine._device("cpu", cuda_devices=2) == ("cpu", 0)


@pytest.mark.usefixtures("installed")
def test_int8_decodes_the_runs_export_whatever_the_search(tmp_path: Path) -> None:
    """int8 lines differ from fp32 by choice: n-best, sampling and prefixes go to CTranslate2 with it."""
    run = make_run(tmp_path / "run")
    for settings in (dict(), dict(beam=4, nbest=2), dict(sampling=True), dict(prefix=True, beam=2)):
        choice = resolved_choice(TranslateConfig(run=str(run), precision="int8", **settings))
        assert choice == EngineChoice("ctranslate2", str(run / "ctranslate2"), "precision=int8 is CTranslate2's")
        forced = resolved_choice(TranslateConfig(run=str(run), precision="int8", engine="ctranslate2", **settings))
        assert forced == choice


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(
    ("settings", "why"),
    [
        (dict(engine="torch"), "engine=torch: precision=int8 is CTranslate2's"),
        (dict(checkpoint="best.pt", run=None), "precision=int8 decodes a run's CTranslate2 export: checkpoint= is a"),
        (dict(attention="plots"), "precision=int8 decodes a run's CTranslate2 export: attention="),
        (dict(stale=True), "precision=int8 decodes a run's CTranslate2 export: .*ctranslate2 was made from update 10"),
    ],
)
def test_int8_where_ctranslate2_cannot_decode_is_one_line(tmp_path: Path, settings: dict, why: str) -> None:
    run = make_run(tmp_path / "run", stale=settings.pop("stale", False))
    with pytest.raises(UserError, match=rf"^config error: {why}"):
        resolved_choice(TranslateConfig(**{"run": str(run), **settings, "precision": "int8"}))


def test_int8_without_the_package_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolved_model, "ctranslate2_installed", lambda: False)
    run = make_run(tmp_path / "run")
    with pytest.raises(UserError, match=r"^config error: precision=int8 .*pip install 'seq2seq\[export\]'"):
        resolved_choice(TranslateConfig(run=str(run), precision="int8"))


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize("bf16", [True, False])
def test_auto_decodes_with_the_export_in_fp32_even_where_bf16_is_faster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bf16: bool
) -> None:
    """precision=auto decodes in fp32 on every CPU (bf16 lines change with their batch-mates), so
    engine=auto takes the run's fp32 export without timing PyTorch against it. PyTorch bf16 is there
    for the asking (precision=bf16)."""
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: bf16)
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    measured: list[tuple[str, ...]] = []
    monkeypatch.setattr(int8_probe, "measure_engines", lambda candidates, load: measured.append(candidates))
    run = make_run(tmp_path / "run")
    for settings in (dict(), dict(device="cpu"), dict(beam=4), dict(beam=1)):
        choice = resolved_choice(TranslateConfig(run=str(run), **settings))
        assert (choice.engine, choice.model) == ("ctranslate2", str(run / "ctranslate2")), (settings, choice.why)
    assert measured == []
    assert resolved_choice(TranslateConfig(run=str(run), precision="bf16")).engine == "torch"


def test_decoding_precision_auto_is_fp32_where_training_would_take_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training's auto takes bf16 where it is measured faster; decoding's auto never does, and an
    explicit bf16 is told that its lines depend on their batch."""
    import torch

    from seq2seq.precision import MatmulRates, choose_decoding_precision, choose_precision

    bf16_faster = lambda d_model, ffn_dim: MatmulRates(fp32=1.0, bf16=3.0, capability="AMX")  # noqa: E731
    cpu = torch.device("cpu")
    monkeypatch.setattr(cpuinfo, "has_bf16", lambda: True)
    assert choose_precision("auto", cpu, 64, 256, bf16_faster).precision == "bf16"
    assert choose_decoding_precision("auto", cpu, 64, 256, bf16_faster).precision == "fp32"
    explicit = choose_decoding_precision("bf16", cpu, 64, 256, bf16_faster)
    assert explicit.precision == "bf16" and "depend on the other sentences of its batch" in explicit.warning
    assert choose_decoding_precision("fp32", cpu, 64, 256, bf16_faster).warning is None


@pytest.mark.usefixtures("installed")
@pytest.mark.parametrize(("int8_seconds", "warned"), [(3.0, True), (1.0, False)])
def test_int8_says_so_where_it_is_slower_than_fp32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, int8_seconds, warned
) -> None:
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    timing = int8_probe.Timing({"ctranslate2": 2.0, "int8": int8_seconds})
    monkeypatch.setattr(int8_probe, "measure_engines", lambda candidates, load: timing)
    run = make_run(tmp_path / "run")
    ctranslate2_engine.say_if_int8_is_slower(
        decoding_job(TranslateConfig(run=str(run), precision="int8")), run / "ctranslate2"
    )
    warning = f"precision=int8 is slower than fp32 on this CPU: {int8_seconds:.2f} s against 2.00 s"
    assert any(warning in message for message in caplog.messages) == warned, caplog.messages


@pytest.mark.usefixtures("installed")
def test_choosing_int8_times_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The choice is made on the resolved description alone: int8's timing against fp32 is taken where
    the export loads (say_if_int8_is_slower), not each time a server chooses for a request's settings."""
    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(int8_probe, "measure_engines", lambda *args: pytest.fail("the choice timed engines"))
    monkeypatch.setattr(int8_probe, "cached", lambda *args: pytest.fail("the choice read the cache"))
    run = make_run(tmp_path / "run")
    for settings in (dict(), dict(beam=4, nbest=2), dict(engine="ctranslate2")):
        assert resolved_choice(TranslateConfig(run=str(run), precision="int8", **settings)).engine == "ctranslate2"


def test_the_probe_times_real_engines_on_a_real_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measurement itself, on a trained run's checkpoint and export (both engines load and decode the
    probe sentences of its vocabulary), cached: a second choice reads the file."""
    pytest.importorskip("ctranslate2")
    from conftest import TINY_TRAIN, compose_config

    from seq2seq.cli.train import train

    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    train(compose_config("train", [*TINY_TRAIN, "max_steps=4"]), tmp_path / "run")
    job = decoding_job(TranslateConfig(run=str(tmp_path / "run"), beam=2))
    load = probe_loader(job, tmp_path / "run" / "ctranslate2")
    timing = int8_probe.cached_timing(job, ("ctranslate2", "int8"), load)
    assert set(timing.seconds) == {"ctranslate2", "int8"} and all(s > 0 for s in timing.seconds.values())
    sentences = int8_probe.probe_sentences(Tokenizers.load(tmp_path / "run").src)
    assert len(sentences) == int8_probe.PROBE_SENTENCES and all(sentences)
    monkeypatch.setattr(int8_probe, "measure_engines", lambda *a: pytest.fail("measured again"))
    assert int8_probe.cached_timing(job, ("ctranslate2", "int8"), load) == timing


@pytest.mark.parametrize(
    ("text", "bf16"),
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile\n", True),
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n", True),
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\nflags\t\t: amx_bf16\n", False),
        ("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n", True),
        ("processor\t: 0\nFeatures\t: fp asimd\n", False),
    ],
)
def test_bf16_instructions_are_read_from_the_first_processors_flags(tmp_path: Path, text: str, bf16: bool) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    assert cpuinfo.has_bf16(path) is bf16
    assert cpuinfo.cpu_flags(tmp_path / "missing") == frozenset() and not cpuinfo.has_bf16(tmp_path / "missing")


def test_the_cpu_name_is_the_first_model_name(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t: avx2\nprocessor\t: 1\nmodel name\t: Other\n")
    assert cpuinfo.cpu_name(path) == "AMD EPYC 9B14"


def test_an_export_that_cannot_decode_on_the_gpu_leaves_auto_on_pytorch(tmp_path, monkeypatch, caplog) -> None:
    """Seen on an H100 with CUDA 13: CTranslate2 4.8's wheel (built for CUDA 12) loads, then fails at the
    first translation with "Library libcublas.so.12 is not found". engine=auto then decodes with
    PyTorch and says why; engine=ctranslate2 is one line of error at load time. The GPU is faked here:
    CTranslate2 counts one, and its translator fails as that one did."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from conftest import TINY_TRAIN, compose_config

    from seq2seq.cli.train import train
    from seq2seq.inference.ctranslate2_engine import EngineUnavailable

    monkeypatch.setenv("SEQ2SEQ_CACHE", str(tmp_path / "cache"))
    train(compose_config("train", [*TINY_TRAIN, "max_steps=4"]), tmp_path / "run")
    real = ctranslate2.Translator

    class WithoutCublas:
        def __init__(self, path: str, device: str, device_index: int = 0, **options) -> None:
            assert device == "cuda"
            self.compute_type = real(path, device="cpu", **options).compute_type

        def translate_batch(self, *args, **kwargs):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    monkeypatch.setattr(ctranslate2, "Translator", WithoutCublas)
    with caplog.at_level("INFO", logger="seq2seq.translate"):
        translator = resolved_engine(TranslateConfig(run=str(tmp_path / "run"), beam=2))
    assert translator.kind == "torch"  # PyTorch's Translator (on this machine's CPU: torch sees no GPU)
    engine_line = next(m for m in caplog.messages if m.startswith("engine: "))
    assert "engine: PyTorch (the run's CTranslate2 export cannot decode here" in engine_line
    assert "libcublas.so.12" in engine_line
    with pytest.raises(EngineUnavailable) as raised:
        resolved_engine(TranslateConfig(run=str(tmp_path / "run"), beam=2, engine="ctranslate2"))
    message = str(raised.value)
    assert "\n" not in message and "cannot decode on the GPU here: Library libcublas.so.12" in message
    assert "engine=torch" in message


@pytest.mark.usefixtures("installed")
def test_once_resolved_the_choice_reads_no_file(tmp_path: Path) -> None:
    """What run= names is read once (resolve); each request's choice is made on that, as a server makes
    it per request: removing the run afterwards changes no choice."""
    run = make_run(tmp_path / "run")
    files = resolved_model.resolve(str(run), None)
    assert (files.export, files.export_unfit, files.given_export) == (str(run / "ctranslate2"), None, False)
    shutil.rmtree(run)
    for settings, engine in (
        (dict(), "ctranslate2"),
        (dict(beam=1, prefix=True), "ctranslate2"),
        (dict(sampling=True), "torch"),
        (dict(beam=4, nbest=2), "torch"),
        (dict(engine="torch"), "torch"),
        (dict(engine="ctranslate2"), "ctranslate2"),
    ):
        job = dataclasses.replace(decoding_job(TranslateConfig(run=str(run), **settings)), model=files)
        assert choose_engine(job).engine == engine, settings
    # Without the description, the choice reads the disk as it is now: the export is gone.
    assert resolved_choice(TranslateConfig(run=str(run))).engine == "torch"


@pytest.mark.usefixtures("installed")
def test_resolving_reads_what_checkpoint_names_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """path_kind opens the file (an Argos package is a zip): resolve asks it once, not once per question."""
    run = make_run(tmp_path / "run")
    asked: list[str] = []
    kind_of = resolved_model.path_kind
    monkeypatch.setattr(resolved_model, "path_kind", lambda path: asked.append(path) or kind_of(path))
    for given in (run / "checkpoints" / "best.pt", run / "ctranslate2"):
        asked.clear()
        files = resolved_model.resolve(None, str(given))
        assert asked == [str(given)] and files.given_export == (given.name == "ctranslate2")


def test_the_resolved_model_file_is_refused_once_written_again_and_left_to_its_reader_once_gone(
    tmp_path: Path,
) -> None:
    """resolve() records run='s model file; one written since is refused in one line, one removed since
    is not called "written again" (reading it then says it is missing)."""
    best = tmp_path / "run" / "checkpoints" / "best.pt"
    best.parent.mkdir(parents=True)
    best.write_bytes(b"first")
    files = resolved_model.resolve(str(tmp_path / "run"), None)
    assert files.unchanged_model_file() == str(best)
    best.write_bytes(b"second save")
    with pytest.raises(UserError, match=f"^{best}: written again since the model was loaded"):
        files.unchanged_model_file()
    best.unlink()
    assert files.unchanged_model_file() == str(best)
