"""The two console scripts, end to end: what a user types and what they get back. In subprocesses where
the console script itself is the point (test_train_writes_a_complete_run_directory's training,
test_translate_keeps_one_output_line_per_input_line, test_console_scripts_report_errors_in_one_line);
elsewhere their `main` in this process (conftest.py's run_main), without an interpreter's start each."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
TINY_RUN = [
    "data.task_train_size=400",
    "data.task_valid_size=20",
    "max_steps=12",
    "valid_every=6",
    "save_every=6",
    "log_every=3",
    "batch_tokens=512",
    "progress=false",
]


def run_cli(
    args: list[str], cwd: Path, stdin: str | None = None, env_cache: Path | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQ2SEQ_CACHE": str(env_cache or cwd / "cache")}
    return subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("cli")
    result = run_cli([str(BIN / "seq2seq-train"), *TINY_RUN, f"hydra.run.dir={workdir / 'run'}"], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir / "run"


def test_train_writes_a_complete_run_directory(trained_run: Path) -> None:
    assert (trained_run / ".hydra" / "config.yaml").is_file()
    assert (trained_run / "tokenizer.json").is_file()
    assert {p.name for p in (trained_run / "checkpoints").glob("*.pt")} >= {
        "last.pt",
        "best.pt",
        "step_6.pt",
        "step_12.pt",
    }
    assert list((trained_run / "tb").glob("events.out.tfevents.*"))
    log = (trained_run / "train.log").read_text()
    assert "validation at update 12" in log
    assert f"seq2seq-translate run={trained_run}" in log
    # What translation reads: the weights alone, and a CTranslate2 model when ctranslate2 is installed.
    assert (trained_run / "model" / "model.safetensors").is_file() and (trained_run / "model" / "config.json").is_file()
    assert f"for translation: {trained_run / 'model'} (safetensors, " in log
    if importlib.util.find_spec("ctranslate2") is not None:
        assert (trained_run / "ctranslate2" / "model.bin").is_file()
        assert f"for translation: {trained_run / 'ctranslate2'} (ctranslate2, " in log
        assert "seq2seq-translate run=, the default)" in log
    # precision=auto (the default) measured this CPU, said what it chose, and the checkpoint records it
    assert "precision: fp32 (auto: bf16 matmul " in log or "precision: bf16 (auto: bf16 matmul " in log
    from seq2seq.artifacts.checkpoint import load_checkpoint

    assert load_checkpoint(trained_run / "checkpoints" / "last.pt")["config"]["precision"] in ("fp32", "bf16")


def test_translate_keeps_one_output_line_per_input_line(trained_run: Path, tmp_path: Path) -> None:
    lines = ["a b c", "", "d e f g h", "   ", "t s r"]
    result = run_cli(
        [str(BIN / "seq2seq-translate"), f"run={trained_run}", "beam=2"], tmp_path, stdin="\n".join(lines) + "\n"
    )
    assert result.returncode == 0, result.stderr
    output = result.stdout.split("\n")
    assert output[-1] == "" and len(output) - 1 == len(lines)
    assert output[1] == "" and output[3] == ""  # empty in, empty out, in place


def test_translate_from_files_with_reference_reports_sacrebleu(trained_run: Path, tmp_path: Path, run_main) -> None:
    (tmp_path / "src.txt").write_text("a b c\nd e f\n")
    (tmp_path / "ref.txt").write_text("C B A\nF E D\n")
    result = run_main(
        [
            "seq2seq-translate",
            f"run={trained_run}",
            "beam=1",
            f"input={tmp_path / 'src.txt'}",
            f"output={tmp_path / 'hyp.txt'}",
            f"reference={tmp_path / 'ref.txt'}",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "hyp.txt").read_text().splitlines()) == 2
    assert "BLEU = " in result.stderr and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in result.stderr
    assert "chrF2 = " in result.stderr


def test_a_reference_of_other_length_costs_no_translation_and_loses_none(
    trained_run: Path, tmp_path: Path, run_main
) -> None:
    # It was found after the whole input was translated, and the error then threw the translations away.
    (tmp_path / "src.txt").write_text("a b c\nd e f\n")
    (tmp_path / "ref.txt").write_text("C B A\n")
    common = [f"run={trained_run}", "beam=1", f"reference={tmp_path / 'ref.txt'}"]
    # A file: counted before the model loads, nothing written.
    given = run_main(["seq2seq-translate", *common, f"input={tmp_path / 'src.txt'}", "output=hyp.txt"], tmp_path)
    assert given.returncode == 2
    assert given.stderr.splitlines() == [
        f"error: {tmp_path / 'ref.txt'} has 1 lines but input={tmp_path / 'src.txt'} has 2"
    ]
    assert not (tmp_path / "hyp.txt").exists()
    # Standard input: its lines are known once translated, and the translations are kept.
    piped = run_main(["seq2seq-translate", *common, "output=piped.txt"], tmp_path, stdin="a b c\nd e f\n")
    assert piped.returncode == 2
    assert piped.stderr.splitlines()[-1].startswith(f"error: {tmp_path / 'ref.txt'} has 1 lines but the input had 2")
    assert len((tmp_path / "piped.txt").read_text().splitlines()) == 2


def test_translate_in_bf16_agrees_with_fp32(trained_run: Path, tmp_path: Path, run_main) -> None:
    """precision=bf16 casts the weights (attention and caches stay fp32 on a CPU): on the trained
    toy model its greedy output is the fp32 output on nearly every line."""
    lines = [" ".join(word) for word in ("abc", "defg", "hij", "klmno", "pqr", "stuv", "wxyz", "bad", "cafe", "edge")]
    outputs = {}
    for precision in ("fp32", "bf16"):
        result = run_main(
            ["seq2seq-translate", f"run={trained_run}", "beam=1", f"precision={precision}"],
            tmp_path,
            stdin="\n".join(lines) + "\n",
        )
        assert result.returncode == 0, result.stderr
        outputs[precision] = result.stdout.splitlines()
    assert len(outputs["bf16"]) == len(lines)
    assert sum(a == b for a, b in zip(outputs["fp32"], outputs["bf16"], strict=True)) >= 8


def test_translate_nbest_writes_moses_style_lines(trained_run: Path, tmp_path: Path, run_main) -> None:
    result = run_main(["seq2seq-translate", f"run={trained_run}", "beam=3", "nbest=3"], tmp_path, stdin="a b\nc d e\n")
    assert result.returncode == 0, result.stderr
    rows = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(r[2]) for r in rows[:3]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run=/nonexistent/run"], "/nonexistent/run: no such run directory"),
        (["checkpoint=/nonexistent/x.pt"], "/nonexistent/x.pt: no such checkpoint file"),
        # a directory there was "no such checkpoint file" too
        (["checkpoint=."], ".: a directory, not a model file: give a run directory as run=, or a checkpoint in it"),
        (["run=.", "beam=0"], "config error: beam=0: must be positive"),
        (["run=.", "precision=fp8"], "config error: precision='fp8': must be one of auto, fp32, bf16, fp16, int8"),
        (  # it said auto "measures bf16 against fp32", which is training's auto: decoding's is fp32
            ["run=.", "precision=fp16", "device=cpu"],
            "config error: precision='fp16' needs a GPU; on a CPU use precision=auto, bf16 or fp32",
        ),
    ],
)
def test_translate_bad_input_is_one_line_error(tmp_path: Path, run_main, args: list[str], expected: str) -> None:
    result = run_main(["seq2seq-translate", *args], tmp_path, stdin="a b\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {expected}"]


TRANSLATE_COMMAND_LINES = [
    [],
    ["run=outputs/2026-11-23/18-12-22", "beam=1"],
    ["checkpoint=run/checkpoints/best.pt", "length_penalty=0.6", "nbest=3", "reference=ref.de", "input=test.en"],
    ["run=r", "sampling=true", "top_p=0.9", "temperature=0.7", "top_k=20", "seed=3", "threads=2", "precision=fp32"],
    ["run=r", "max_len_a=2", "max_len_b=5", "attention=null", "prefix=true", "debug=true", "device=cpu"],
    # Read as YAML, input=- (the standard input, as --help says) was a list, and no (Norwegian) False.
    ["run=r", "input=-", "output=-", "tgt_lang=no", "src_lang=yes", "reference='on'"],
]


@pytest.mark.parametrize("argv", TRANSLATE_COMMAND_LINES)
def test_translate_parses_its_command_line_as_hydra_composes_it(argv: list[str]) -> None:
    from conftest import compose_config
    from omegaconf import OmegaConf

    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import TranslateConfig

    ours = OmegaConf.to_container(parse_key_values(argv, TranslateConfig))
    hydras = OmegaConf.to_container(compose_config("translate", argv))
    hydras.pop("hydra", None)
    assert ours == hydras


def test_translate_takes_an_ensemble_as_one_comma_separated_value() -> None:
    """Hydra's grammar reads `a,b` as a sweep and refuses it without -m; the README's ensemble line needs it as is."""
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import TranslateConfig

    cfg = parse_key_values(["checkpoint=run/checkpoints/step_1600.pt,run/checkpoints/step_1700.pt"], TranslateConfig)
    assert cfg.checkpoint == "run/checkpoints/step_1600.pt,run/checkpoints/step_1700.pt"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["beam=abc"], "beam: Value 'abc' of type 'str' could not be converted to Integer"),
        (["run"], "run: expected key=value; --help lists the keys"),
        (["+beams=3"], "+beams: unknown key; did you mean beam?"),
    ],
)
def test_translate_command_line_errors_name_the_key(argv: list[str], expected: str) -> None:
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import TranslateConfig, UserError

    with pytest.raises(UserError) as caught:
        parse_key_values(argv, TranslateConfig)
    assert str(caught.value) == expected


def test_translate_starts_without_hydra_unless_asked_for_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.argv = ['seq2seq-translate', 'run=/nonexistent/run']\n"
        "import seq2seq.cli.translate as command\n"
        "try:\n    command.main()\nexcept SystemExit:\n    pass\n"
        "print('hydra' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
    assert "error: /nonexistent/run: no such run directory" in done.stderr
    # Hydra's own flags still work: --cfg job prints the composed config and translates nothing.
    result = run_cli([str(BIN / "seq2seq-translate"), "--cfg", "job", "run=r", "beam=3"], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "beam: 3" in result.stdout and "run: r" in result.stdout


def test_translate_refuses_a_truncated_checkpoint(trained_run: Path, tmp_path: Path, run_main) -> None:
    broken = tmp_path / "checkpoints" / "best.pt"
    broken.parent.mkdir()
    data = (trained_run / "checkpoints" / "best.pt").read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    (tmp_path / "tokenizer.json").write_bytes((trained_run / "tokenizer.json").read_bytes())
    result = run_main(["seq2seq-translate", f"run={tmp_path}"], tmp_path, stdin="a b\n")
    assert result.returncode == 2
    assert f"{broken}: not a readable checkpoint (truncated or corrupt)" in result.stderr
    assert "Traceback" not in result.stderr


def test_translate_validates_its_config_once(trained_run: Path, tmp_path: Path, run_main, monkeypatch) -> None:
    # Every module's name for validate_translate counts: a second check hides in any of them.
    import seq2seq.cli.translate  # noqa: F401  (and the command's modules, before their names are patched)
    import seq2seq.inference.command  # noqa: F401
    import seq2seq.inference.job  # noqa: F401
    from seq2seq import config

    original, calls = config.validate_translate, []

    def counted(cfg: object) -> None:
        calls.append(cfg)
        original(cfg)

    holders = [m for m in list(sys.modules.values()) if getattr(m, "validate_translate", None) is original]
    assert {"seq2seq.config", "seq2seq.inference.job"} <= {m.__name__ for m in holders}
    for module in holders:
        monkeypatch.setattr(module, "validate_translate", counted)
    result = run_main(["seq2seq-translate", f"run={trained_run}"], tmp_path, stdin="a b\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == 1 and len(calls) == 1


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("model.heads=3", "config error: model.d_model=64: must be divisible by model.heads=3"),
        ("optim.warmup=0", "config error: optim.warmup=0: must be positive (the schedules divide by it)"),
        ("max_steps=0", "config error: max_steps=0: must be positive or null"),
        ("model.dropout=-0.1", "config error: model.dropout=-0.1: must be in [0, 1)"),
        # A traceback where max_steps was first read, and a train.log left behind.
        ("max_steps=${nope}", "config error: max_steps: Interpolation key 'nope' not found"),
    ],
)
def test_train_rejects_impossible_values_before_any_work(
    tmp_path: Path, run_main, override: str, expected: str
) -> None:
    result = run_main(["seq2seq-train", override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"error: {expected}"
    assert not (tmp_path / "cache").exists()  # stopped before reading or tokenizing anything
    assert not (tmp_path / "run").exists()  # and left no empty run directory behind


@pytest.mark.parametrize("override", ["max_steps=ten", "seed=abc", "model.d_model=abc", "model.dropout=high"])
def test_train_refuses_a_value_of_the_wrong_type_in_one_line(tmp_path: Path, run_main, override: str) -> None:
    # Hydra's own answer was four lines and exit status 1, after writing the run directory.
    result = run_main(["seq2seq-train", override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    key, value = override.split("=")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: config error: {key}={value!r}: Value {value!r} of type 'str' could not be converted to "
        + ("Integer" if key != "model.dropout" else "Float")
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", [False, True])
def test_a_start_that_fails_on_its_data_leaves_no_run_directory_it_created(
    tmp_path: Path, run_main, given: bool
) -> None:
    run = tmp_path / "outputs" / "run"
    if given:  # a directory the user had: left alone, with what was in it
        run.mkdir(parents=True)
        (run / "notes.txt").write_text("mine")
    result = run_main(
        ["seq2seq-train", "data=multi30k", f"data.dir={tmp_path / 'nonexistent'}", f"hydra.run.dir={run}"], tmp_path
    )
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "nonexistent" in result.stderr
    assert run.exists() == given
    if given:
        assert (run / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["new", "given", "hydra"])
@pytest.mark.parametrize("weights", ["not-a-model", "other-shape"])
def test_a_start_refused_for_its_init_from_takes_back_what_it_made(
    trained_run: Path, tmp_path: Path, run_main, where: str, weights: str
) -> None:
    # It left .hydra/, train.log, .seq2seq-run, .lock and tokenizer.json behind (and outputs/.lock).
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# notes\n")
    run = work / "outputs" / "run"
    if where == "given":  # a directory the user had: left with what it held, and only that
        run.mkdir(parents=True)
        (run / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    init_from = [f"init_from={work / 'README.md'}"] if weights == "not-a-model" else [f"init_from={trained_run}"]
    shape = ["model.d_model=32"] if weights == "other-shape" else []
    args = [*TINY_RUN, *init_from, *shape] + ([f"hydra.run.dir={run}"] if where != "hydra" else [])
    result = run_main(["seq2seq-train", *args], work)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert ("model.d_model: 64 in init_from, 32 here" if shape else "README.md: not a readable") in result.stderr
    after = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.relative_to(work).parts[0] != "cache")
    assert after == before
    if where == "given":
        assert (run / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("where", ["new", "given", "hydra"])
def test_a_start_refused_for_its_device_takes_back_what_it_made(tmp_path: Path, run_main, where: str) -> None:
    # It left .hydra/, train.log and .lock behind: the device was chosen before the take-back began.
    import torch

    work = tmp_path / "work"
    work.mkdir()
    run = work / "outputs" / "run"
    if where == "given":  # a directory the user had: left with what it held, and only that
        run.mkdir(parents=True)
        (run / "notes.txt").write_text("mine")
    before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    args = [*TINY_RUN, f"device=cuda:{gpus}"] + ([f"hydra.run.dir={run}"] if where != "hydra" else [])
    result = run_main(["seq2seq-train", *args], work)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert f"device=cuda:{gpus}: " in result.stderr
    after = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.relative_to(work).parts[0] != "cache")
    assert after == before
    if where == "given":
        assert (run / "notes.txt").read_text() == "mine"


def test_a_refused_resume_leaves_the_run_as_it_was(trained_run: Path, tmp_path: Path, run_main) -> None:
    # Hydra's .hydra/resumed-<time>/ of the refused start stayed in the run; train.log (the run's own,
    # which Hydra appends to) stays, with the error at its end.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    result = run_main(["seq2seq-train", f"resume={run}", "max_steps=0"], tmp_path)
    assert result.returncode == 2 and "max_steps=0: must be positive or null" in result.stderr
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before


def test_train_validates_its_config_once(tmp_path: Path, run_main, monkeypatch: pytest.MonkeyPatch) -> None:
    # The command checked the composed config before Hydra ran, then train() checked it again.
    import seq2seq.cli.train as command
    import seq2seq.config as config
    import seq2seq.train.plan as plan

    calls = []
    for name in ("validate_train", "validate_recipes"):
        real = getattr(config, name)
        counting = lambda cfg, real=real, name=name: calls.append(name) or real(cfg)  # noqa: E731
        monkeypatch.setattr(command, name, counting)
        monkeypatch.setattr(plan, name, counting)
    result = run_main(["seq2seq-train", *TINY_RUN, "max_steps=1", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls == ["validate_train", "validate_recipes"]


@pytest.mark.parametrize(("override", "key"), [("model.d_modle=64", "d_modle"), ("model=huge", "huge")])
def test_train_rejects_unknown_keys_groups_and_types(tmp_path: Path, run_main, override: str, key: str) -> None:
    result = run_main(["seq2seq-train", override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode != 0
    assert key in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("command", "override", "expected"),
    [
        ("seq2seq-train", "max_step=5", "max_step: unknown key; did you mean max_steps?"),
        ("seq2seq-train", "+max_step=5", "max_step: unknown key; did you mean max_steps?"),
        ("seq2seq-train", "++model.d_modle=64", "model.d_modle: unknown key; did you mean model.d_model?"),
        ("seq2seq-train", "+foo=1", "foo: unknown key; --help lists the keys"),
        ("seq2seq-train", "model=huge", "model=huge: unknown option; choose from base, big, small, tiny"),
        ("seq2seq-translate", "beams=3", "beams: unknown key; did you mean beam?"),
        ("seq2seq-translate", "model=small", "model: unknown key; --help lists the keys"),
    ],
)
def test_unknown_keys_are_refused_in_one_line_with_or_without_plus(
    tmp_path: Path, run_main, command: str, override: str, expected: str
) -> None:
    # `+key=...` used to be added to the config and the run went ahead with it ignored.
    result = run_main([command, override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {expected}"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("command", "override", "expected"),
    [
        ("seq2seq-train", "max_step=5", "max_step: unknown key; did you mean max_steps?"),
        ("seq2seq-translate", "beams=3", "beams: unknown key; did you mean beam?"),
        ("seq2seq-distill", "beams=3", "beams: unknown key; did you mean beam?"),
    ],
)
def test_console_scripts_report_errors_in_one_line(tmp_path: Path, command: str, override: str, expected: str) -> None:
    """The tests above call each command's `main` in this process; this one goes through the installed
    script (launch.py's re-launch on tcmalloc included) to its exit status and stderr."""
    result = run_cli([str(BIN / command), override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {expected}"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("make_args", "expected"),
    [
        (lambda tmp: [f"hydra.run.dir={tmp / 'file' / 'run'}"], "{tmp}/file/run: the run directory is not writable"),
        (lambda tmp: [f"resume={tmp / 'missing'}"], "resume={tmp}/missing: no such run directory"),
        (lambda tmp: [f"resume={tmp}"], "resume={tmp}: has no checkpoints/last.pt to resume from"),
    ],
    ids=["parent-is-a-file", "resume-missing", "resume-without-checkpoint"],
)
def test_train_refuses_a_run_directory_it_cannot_use_in_one_line(
    tmp_path: Path, run_main, make_args, expected: str
) -> None:
    # Hydra used to create it (and .hydra/, train.log) first, or fail with "Unable to configure handler 'file'".
    (tmp_path / "file").touch()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_main(["seq2seq-train", *make_args(tmp_path)], tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {expected.format(tmp=tmp_path)}")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_new_train_into_a_finished_run_is_refused_before_hydra_writes_into_it(trained_run: Path, run_main) -> None:
    # It replaced best.pt, last.pt, model/ and ctranslate2/ with a new model and left the old step_N.pt.
    config = (trained_run / ".hydra" / "config.yaml").read_bytes()
    before = {p: p.stat().st_mtime_ns for p in trained_run.rglob("*") if p.name not in ("train.log", ".lock")}
    result = run_main(["seq2seq-train", "max_steps=1", f"hydra.run.dir={trained_run}"], trained_run.parent)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {trained_run}: holds an earlier run (checkpoints/best.pt); continue it with resume={trained_run}, "
        "start afresh there with overwrite=true, or choose another directory"
    ]
    assert (trained_run / ".hydra" / "config.yaml").read_bytes() == config
    assert {p: p.stat().st_mtime_ns for p in trained_run.rglob("*") if p.name not in ("train.log", ".lock")} == before


def test_translate_help_lists_only_its_own_keys_with_their_descriptions(tmp_path: Path, run_main) -> None:
    # It listed the training groups (model, data, ...), which translation then refused, and no descriptions.
    result = run_main(["seq2seq-translate", "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "  beam=5  # beam size; 1 is greedy search" in result.stdout.splitlines()
    listed = [
        line.split("=")[0].split()[0] for line in result.stdout.splitlines() if line.startswith("  ") and line.strip()
    ]
    assert not [key for key in listed if key.split(".")[0] in ("model", "optim", "data")], listed


def test_train_help_shows_groups_and_each_keys_value_and_description(tmp_path: Path, run_main) -> None:
    result = run_main(["seq2seq-train", "model=small", "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  model        base, big, small, tiny" in lines
    assert "  model.d_model=256  # width of every residual stream vector" in lines  # model=small applied
    assert "  max_steps=2000  # updates; null: no limit" in lines


def test_the_help_of_the_commands_without_groups_shows_every_default() -> None:
    # seq2seq-distill --help showed back_translate=<dataclasses._MISSING_TYPE object at 0x...>: a
    # default made by a factory (a list) was read as the field's plain default.
    shown = {}
    for command in ("seq2seq-distill", "seq2seq-average"):
        result = subprocess.run([str(BIN / command), "--help"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "MISSING" not in result.stdout, result.stdout
        shown[command] = result.stdout
    lines = shown["seq2seq-distill"].splitlines()
    assert any(line.startswith("  back_translate=[]  # ") for line in lines), lines
    assert any(line.startswith("  speed_threads=[1, 2]  # ") for line in lines), lines


def test_a_second_train_into_a_busy_run_directory_stops_before_hydra_writes_into_it(tmp_path: Path, run_main) -> None:
    from seq2seq.train.lock import run_directory_lock

    run = tmp_path / "run"
    run.mkdir()
    with run_directory_lock(run):  # held by "the first run" (this process; flock tells its two opens apart)
        result = run_main(["seq2seq-train", f"hydra.run.dir={run}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {run}: another seq2seq-train (process {os.getpid()}) is using this run directory; "
        "wait for it to end or choose another directory"
    ]
    assert sorted(p.name for p in run.iterdir()) == [".lock"]  # no .hydra/ or train.log of the second run


@pytest.mark.parametrize("value", ["/tmp/rün", "/tmp/my rün"])
def test_an_unquoted_path_hydra_cannot_read_is_one_line_saying_how_to_quote_it(value: str) -> None:
    # Hydra's "LexerNoViableAltException: hydra.run.dir=/tmp/rün" did not say what to do.
    import shlex

    from seq2seq.cli.common import parse_command_line
    from seq2seq.config import UserError

    with pytest.raises(UserError) as info:
        parse_command_line(["max_steps=3", f"hydra.run.dir={value}"])
    advice = f"\"hydra.run.dir='{value}'\""
    assert str(info.value) == (
        f"cannot parse the command line: hydra.run.dir={value}: Hydra reads non-ASCII letters only in quotes, "
        f"inside the argument: {advice}"
    )
    _, overrides = parse_command_line(shlex.split(advice))  # the advice, as the shell passes it on
    assert overrides[0].value() == value


def test_the_interpolations_of_key_value_commands_must_resolve() -> None:
    from seq2seq.cli.common import parse_key_values
    from seq2seq.config import TranslateConfig, UserError

    # seq2seq-translate 'beam=${nope}': a traceback where beam was first read.
    with pytest.raises(UserError, match=r"^config error: beam: Interpolation key 'nope' not found$"):
        parse_key_values(["run=x", "beam=${nope}"], TranslateConfig)
    assert parse_key_values(["run=x", "nbest=${beam}", "beam=3"], TranslateConfig).nbest == 3


@pytest.mark.slow  # a training start in a subprocess: 10-50 s on 2 shared cores
def test_a_second_ctrl_c_while_training_exits_130_in_one_line(tmp_path: Path) -> None:
    # The first Ctrl-C asks for a save after the update; the second was a 60-line KeyboardInterrupt.
    code = f"""
import os, signal, sys
import seq2seq.train.trainer as loop
step = loop.Trainer.train_step
def interrupted_twice(self):
    metrics = step(self)
    if self.step == 2:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return metrics
loop.Trainer.train_step = interrupted_twice
sys.argv = ["seq2seq-train", *{TINY_RUN!r}, "hydra.run.dir={tmp_path / "run"}", "attention_images=false",
            "data.task_train_size=100", "threads=1", "precision=fp32"]
from seq2seq.cli.train import main
main()
"""
    result = run_cli([sys.executable, "-c", code], tmp_path)
    assert result.returncode == 130, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "interrupted" and "Traceback" not in result.stderr


@pytest.mark.parametrize("debug", [False, True])
def test_ctrl_c_reaching_a_command_is_one_line_and_status_130(capsys, debug: bool) -> None:
    from seq2seq.cli.common import exit_on_interrupt

    def interrupted() -> None:
        raise KeyboardInterrupt

    if debug:  # debug=true: the traceback, as for every other error
        with pytest.raises(KeyboardInterrupt):
            exit_on_interrupt(interrupted, debug=True)
        return
    with pytest.raises(SystemExit) as info:
        exit_on_interrupt(interrupted, debug=False)
    assert info.value.code == 130 and capsys.readouterr().err == "interrupted\n"
    assert exit_on_interrupt(lambda: 7, debug=False) == 7


@pytest.mark.parametrize("command", ["seq2seq-average", "seq2seq-distill"])
def test_key_help_read_in_part_ends_quietly(command: str, tmp_path: Path) -> None:
    """`--help | head -1`: the reader closes the pipe before the rest is written, which is no error."""
    done = subprocess.run(
        f"{BIN / command} --help | head -1", shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.startswith(f"usage: {command} ")
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr


# A path typed wrong, for each command: (argv, the start of the one line it answers).
MISSING_PATHS = [
    (["seq2seq-train", "data=multi30k", "data.dir=/nonexistent", "hydra.run.dir=RUN"], "error: data.dir=/nonexistent:"),
    (
        [
            "seq2seq-train",
            "data=parallel_files",
            "data.train_src=/nope",
            "data.train_tgt=/nope",
            "data.valid_src=/nope",
            "data.valid_tgt=/nope",
            "hydra.run.dir=RUN",
        ],
        "error: data.train_src=/nope: no such file",
    ),  # fmt: skip
    (["seq2seq-train", "resume=/nonexistent"], "error: resume=/nonexistent: no such run directory"),
    (["seq2seq-translate", "run=/nonexistent"], "error: /nonexistent: no such run directory"),
    (["seq2seq-translate", "checkpoint=/nonexistent.pt"], "error: /nonexistent.pt: no such checkpoint file"),
    (["seq2seq-export", "run=/nonexistent", "output=OUT"], "error: /nonexistent: no such run directory"),
    (["seq2seq-average", "run=/nonexistent", "last=2"], "error: run=/nonexistent: no such run directory"),
    (["seq2seq-distill", "teacher=/nonexistent", "output=OUT"], "error: teacher=/nonexistent: /nonexistent: no such"),
    (["seq2seq-serve", "run=/nonexistent"], "error: /nonexistent: no such run directory"),
]
CHECK_WITHOUT_TORCH = """
import contextlib, importlib, io, json, sys
cases, answers = json.loads(sys.argv[1]), []
for argv in cases:
    sys.argv = argv
    module = importlib.import_module("seq2seq.cli." + argv[0].removeprefix("seq2seq-"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
        module.main()
    answers.append([err.getvalue(), "torch" in sys.modules])
print(json.dumps(answers))
"""


def test_a_path_typed_wrong_is_answered_without_importing_torch(tmp_path: Path) -> None:
    """Regression: a missing data.dir or run directory was answered after torch had loaded (15-16 s on a
    busy machine), where a bad setting took a fraction of a second. One process runs every command's
    check in turn: torch is never imported, and nothing is left behind."""
    cases = [
        [a.replace("RUN", str(tmp_path / "run")).replace("OUT", str(tmp_path / "out")) for a in argv]
        for argv, _ in MISSING_PATHS
    ]
    result = subprocess.run(
        [sys.executable, "-c", CHECK_WITHOUT_TORCH, json.dumps(cases)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "SEQ2SEQ_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    answers = json.loads(result.stdout.splitlines()[-1])
    for (argv, expected), (stderr, torch_loaded) in zip(MISSING_PATHS, answers, strict=True):
        assert stderr.startswith(expected) and len(stderr.splitlines()) == 1, (argv, stderr)
        assert not torch_loaded, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _list_fields(schema: type, prefix: str = "") -> set[str]:
    """Every key of `schema` typed as a list, read off the annotations' text (nested configs included)."""
    import dataclasses

    from seq2seq import config

    found = set()
    for field in dataclasses.fields(schema):
        nested = getattr(config, str(field.type), None)
        if dataclasses.is_dataclass(nested):
            found |= _list_fields(nested, f"{prefix}{field.name}.")
        elif "list[" in str(field.type):
            found.add(prefix + field.name)
    return found


# One value of each list key's items, as a user would write it.
LIST_ITEMS = {"data.directions": "en-de", "optim.betas": "0.9", "recipes": "big", "back_translate": "de-fr"}
LIST_ITEMS |= {"speed_threads": "2", "runs": "/runs/b", "cors_origins": "https://example.org"}
LIST_ITEMS |= {
    "data.corpora": "{name:extra,kind:tsv,train:extra.tsv}",
    "data.clean_settings.languages": "fr",
    "freeze": "encoder",
}


def test_a_list_key_given_one_value_without_brackets_says_how_to_write_it() -> None:
    """`back_translate=de-fr` was answered in OmegaConf's words ("AnyNode is not a ListConfig"), on
    every list-valued key of every command: now one line that gives the bracketed form."""
    from seq2seq.cli.common import check_override_keys, parse_key_values
    from seq2seq.cli.train import GROUPS
    from seq2seq.config import (
        AverageConfig,
        DistillConfig,
        ExportConfig,
        ServeConfig,
        TrainConfig,
        TranslateConfig,
        UserError,
    )

    # How each command reads its command line: Hydra's overrides (train; serve's Hydra form), or key=value.
    readers = {
        TrainConfig: [lambda argv: check_override_keys(argv, TrainConfig, GROUPS)],
        ServeConfig: [
            lambda argv: parse_key_values(argv, ServeConfig),
            lambda argv: check_override_keys(argv, ServeConfig),
        ],
        **{schema: [functools.partial(parse_key_values, schema=schema)] for schema in (TranslateConfig, DistillConfig)},
        **{schema: [functools.partial(parse_key_values, schema=schema)] for schema in (ExportConfig, AverageConfig)},
    }
    checked = set()
    for schema, ways in readers.items():
        for key in _list_fields(schema):
            value = LIST_ITEMS[key]
            for read in ways:
                with pytest.raises(UserError) as refused:
                    read([f"{key}={value}"])
                assert str(refused.value) == f"config error: {key}={value}: takes a list, in brackets: {key}=[{value}]"
                if key != "recipes":  # a recipe is a mapping: [big] is a list, of the wrong items
                    read([f"{key}=[{value}]"])
            checked.add(key)
    assert checked == set(LIST_ITEMS)
    sweep = "data.directions=en-de,en-fr"  # Hydra reads it as two runs, one per direction
    with pytest.raises(UserError, match=r"in brackets: data.directions=\[en-de,en-fr\]$"):
        check_override_keys([sweep], TrainConfig, GROUPS)


def test_seq2seq_distill_says_how_to_write_one_back_translated_direction(tmp_path: Path) -> None:
    result = run_cli([str(BIN / "seq2seq-distill"), "teacher=t", "output=o", "back_translate=de-fr"], tmp_path)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "error: config error: back_translate=de-fr: takes a list, in brackets: back_translate=[de-fr]"
    ]
