"""scripts/bench_student_shapes.py: each shape gets the sizes asked for (the rest the teacher's), the
teacher's row counts the parameters its training counted, the lines decode as many tokens as the
teacher's translations have, and a malformed shape is refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import TINY_TRAIN, compose_config
from script_module import load_script

from seq2seq.artifacts.checkpoint import load_checkpoint
from seq2seq.artifacts.run_dir import RunDir
from seq2seq.inference.loading import load

bench = load_script("bench_student_shapes")
SENTENCES = [f"{a} {b} and {c}" for a in ("one", "two", "three") for b in ("red", "blue") for c in ("cat", "dog")]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from seq2seq.cli.train import train

    root = tmp_path_factory.mktemp("teacher")
    overrides = [*TINY_TRAIN, "data.task_train_size=120", "data.task_valid_size=12", f"data.cache_dir={root / 'c'}"]
    with pytest.MonkeyPatch.context() as patch:  # module scope: conftest's per-test cache is not set yet
        patch.setenv("SEQ2SEQ_CACHE", str(tmp_path_factory.getbasetemp() / "seq2seq-cache"))
        train(compose_config("train", overrides), root / "run", overrides=overrides)
    return root / "run"


def test_each_shape_is_timed_with_the_sizes_asked_for(teacher: Path, tmp_path: Path) -> None:
    sources = tmp_path / "sources.txt"
    sources.write_text("\n".join(SENTENCES[:6]) + "\n")
    corpus = [tmp_path / "corpus.src", tmp_path / "corpus.tgt"]
    for path in corpus:
        path.write_text("\n".join(SENTENCES * 3) + "\n")
    argv = ["--teacher", str(teacher), "--sources", str(sources), "--repeats", "1", "--compute-types", "float32,int8"]
    argv += ["--shape", "d_model=32,decoder_layers=1", "--shape", "vocab=280", "--corpus", *map(str, corpus)]
    result = bench.main(argv)

    payload = load_checkpoint(RunDir(teacher).find_checkpoint())
    stored = payload["config"]["model"]
    first, narrow, small_vocab = result["rows"]
    sizes = ("d_model", "heads", "ffn_dim", "encoder_layers", "decoder_layers")
    assert {k: first["shape"][k] for k in sizes} == {k: stored[k] for k in sizes}
    assert {k: narrow["shape"][k] for k in sizes} == {
        **{k: stored[k] for k in sizes},
        "d_model": 32,
        "decoder_layers": 1,
    }
    tensors = {t.untyped_storage().data_ptr(): t.numel() for t in payload["model"].values()}  # tied ones once
    assert first["parameters"] == sum(tensors.values())
    assert narrow["parameters"] < first["parameters"]
    assert small_vocab["shape"]["vocab"] <= 280 < first["shape"]["vocab"]

    engine = load(str(teacher), beam=5)
    lengths = [len(ids) for ids in engine.tokenizers.encode_tgt(engine.translate(SENTENCES[:6]))]
    assert first["target_tokens_per_line"] == round(sum(lengths) / len(lengths), 2)
    assert first["speedup"] == {"float32": 1.0, "int8": 1.0}
    assert all(v > 0 for row in result["rows"] for v in row["lines_per_second"].values())


@pytest.mark.parametrize(
    ("shape", "message"),
    [("d_model=x", "'d_model=x' is not KEY=N"), ("layers=2", "'layers=2' is not KEY=N"), ("vocab=300", "--corpus")],
)
def test_a_malformed_shape_is_refused_in_one_line(teacher: Path, tmp_path: Path, shape: str, message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        bench.main(["--teacher", str(teacher), "--sources", str(tmp_path / "none.txt"), "--shape", shape])
