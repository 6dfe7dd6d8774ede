"""What a path names (seq2seq/artifacts/path_kind.py), told by the files in it: the layouts here are made by hand
as each tool writes them (names only; no file is read but a config.json)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from seq2seq.artifacts.marian import is_huggingface_model
from seq2seq.artifacts.path_kind import PathKind, path_kind
from seq2seq.config import UserError
from seq2seq.inference import Translator


def make(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


MARIAN_CONFIG = json.dumps({"model_type": "marian", "d_model": 512})
OUR_WEIGHTS_CONFIG = json.dumps({"format": "seq2seq-weights-1", "model": {}, "vocab": {}})


@pytest.mark.parametrize(
    ("files", "kind"),
    [
        ({"checkpoints/best.pt": "", ".hydra/config.yaml": "", "model/model.safetensors": ""}, PathKind.RUN),
        ({"notes.txt": ""}, PathKind.RUN),  # any other directory: where run= looks for checkpoints
        ({"model.safetensors": "", "config.json": OUR_WEIGHTS_CONFIG, "tokenizer.json": ""}, PathKind.WEIGHTS),
        (
            {"model.bin": "", "config.json": "{}", "seq2seq.json": "", "shared_vocabulary.json": ""},
            PathKind.CTRANSLATE2,
        ),
        ({"config.json": MARIAN_CONFIG, "model.safetensors": "", "source.spm": ""}, PathKind.HUGGINGFACE),
        ({"config.json": MARIAN_CONFIG, "pytorch_model.bin": ""}, PathKind.HUGGINGFACE),
        ({"config.json": "not json", "model.safetensors": ""}, PathKind.WEIGHTS),  # load_weights says what is wrong
    ],
    ids=["run", "other directory", "weights export", "ctranslate2 export", "marian", "marian .bin", "bad config"],
)
def test_a_directory_is_what_its_files_say(tmp_path: Path, files: dict[str, str], kind: PathKind) -> None:
    assert path_kind(make(tmp_path / "d", files)) is kind
    assert path_kind(str(tmp_path / "d")) is kind


def test_a_file_or_a_missing_path_is_a_checkpoint_unless_it_is_safetensors(tmp_path: Path) -> None:
    make(tmp_path, {"best.pt": "", "model.safetensors": ""})
    assert path_kind(tmp_path / "best.pt") is PathKind.CHECKPOINT
    assert path_kind(tmp_path / "missing.pt") is PathKind.CHECKPOINT  # loading it says "no such checkpoint file"
    assert path_kind(tmp_path / "model.safetensors") is PathKind.WEIGHTS
    assert path_kind(tmp_path / "elsewhere.safetensors") is PathKind.WEIGHTS


def test_init_from_asks_the_same_question(tmp_path: Path) -> None:
    marian = make(tmp_path / "marian", {"config.json": MARIAN_CONFIG, "model.safetensors": ""})
    ours = make(tmp_path / "ours", {"config.json": OUR_WEIGHTS_CONFIG, "model.safetensors": ""})
    assert is_huggingface_model(str(marian)) and not is_huggingface_model(str(ours))
    assert is_huggingface_model("Helsinki-NLP/opus-mt-en-de")  # a Hub id: not a path here


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"model.bin": "", "config.json": "{}"}, "a CTranslate2 model, not one PyTorch translation reads; "),
        # Read as a Marian model (seq2seq.artifacts.marian), which names what this one lacks.
        ({"config.json": MARIAN_CONFIG, "model.safetensors": ""}, "no source.spm, target.spm and vocab.json "),
    ],
    ids=["ctranslate2", "huggingface"],
)
def test_pytorch_translation_names_a_model_it_does_not_read(tmp_path: Path, files: dict[str, str], says: str) -> None:
    # They were "has no checkpoint (looked for checkpoints/{best,last}.pt)" and "config.json: not a seq2seq
    # weights config": true, but no help to find what does read them.
    model = make(tmp_path / "model", files)
    for path in (model, [model]):
        with pytest.raises(UserError, match=f"^{re.escape(str(model))}: {says}") as info:
            Translator.load(path, device="cpu")
        assert "\n" not in str(info.value)


def argos_package(path: Path) -> Path:
    """A zip laid out as seq2seq-export format=argos (and every Argos package) lays it out; names only."""
    with zipfile.ZipFile(path, "w") as archive:
        for name in ("metadata.json", "sentencepiece.model", "README.md", "model/model.bin", "model/config.json"):
            archive.writestr(f"translate-en_de-1_0/{name}", "")
    return path


def test_an_argos_package_is_told_by_its_name_or_its_files(tmp_path: Path) -> None:
    package = argos_package(tmp_path / "en_de.argosmodel")
    renamed = argos_package(tmp_path / "en_de.zip")
    with zipfile.ZipFile(package) as archive:
        archive.extractall(tmp_path / "unzipped")
    folder = tmp_path / "unzipped" / "translate-en_de-1_0"
    for path in (package, renamed, folder, folder / "model"):
        assert path_kind(path) is PathKind.ARGOS, path
    assert path_kind(tmp_path / "missing.argosmodel") is PathKind.CHECKPOINT  # "no such checkpoint file"
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("archive/data.pkl", "")  # what torch.save writes: a zip of other names
    assert path_kind(tmp_path / "other.zip") is PathKind.CHECKPOINT


def test_an_argos_package_given_as_a_model_says_what_it_is_and_how_to_use_one(tmp_path: Path) -> None:
    # It was "not a readable checkpoint (truncated or corrupt): Expected hasRecord("version") ...".
    from seq2seq.artifacts.checkpoint import load_checkpoint
    from seq2seq.artifacts.model_files import read_model_file
    from seq2seq.inference import CTranslate2Translator
    from seq2seq.inference.loading import load

    package = argos_package(tmp_path / "en_de.argosmodel")
    expected = (
        f"{package}: an Argos Translate package, which Argos Translate and LibreTranslate read, not seq2seq; "
        "translate with the run or checkpoint it was exported from (seq2seq-translate run=<run dir>), or install "
        "it into Argos Translate: python -c 'import argostranslate.package as p; "
        f'p.install_from_path("{package}")\''
    )
    readers = [
        lambda: Translator.load(package, device="cpu"),
        lambda: CTranslate2Translator.load(package, device="cpu"),
        lambda: load(package, device="cpu"),  # engine=auto, as seq2seq-translate checkpoint=
        lambda: load_checkpoint(package),  # what seq2seq-export, seq2seq-average and init_from= read with
        lambda: read_model_file(package),  # what both read a model to build with
    ]
    for read in readers:
        with pytest.raises(UserError) as info:
            read()
        assert str(info.value) == expected
