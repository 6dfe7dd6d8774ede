"""What a path names (seq2seq/artifacts/path_kind.py), told by the files in it: the layouts here are made by hand
as each tool writes them (names only; no file is read but a config.json)."""

from __future__ import annotations

import json
import re
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
