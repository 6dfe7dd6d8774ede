"""seq2seq-export format=argos: the package that the real argostranslate installs (into a temporary
package directory, offline) and translates with, compared line by line with seq2seq-translate."""

from __future__ import annotations

import importlib
import json
import shlex
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import SENTENCEPIECE_LINES, TINY_TRAIN, compose_config

from seq2seq.artifacts.export import export
from seq2seq.config import ExportConfig, UserError
from seq2seq.inference.translator import Translator
from seq2seq.train.run import train

pytest.importorskip("argostranslate", reason="needs `pip install seq2seq[argos]`")


@pytest.fixture
def argos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """argostranslate with its data, config and package directories under tmp_path: its settings
    module reads them from the environment when imported, so it is imported afresh here. Its
    sentence splitter (MiniSBD) downloads a model on first use: one sentence per line instead."""
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("ARGOS_PACKAGES_DIR", str(tmp_path / "packages"))
    for module in [m for m in sys.modules if m == "argostranslate" or m.startswith("argostranslate.")]:
        monkeypatch.delitem(sys.modules, module)
    package = importlib.import_module("argostranslate.package")
    translate = importlib.import_module("argostranslate.translate")
    sbd = importlib.import_module("argostranslate.sbd")
    monkeypatch.setattr(sbd.MiniSBDSentencizer, "split_sentences", lambda self, text: [text])
    assert package.get_installed_packages() == []  # nothing of the user's is seen (or touched)
    return package, translate


@pytest.mark.parametrize("quantization", [None, "int8"])
def test_the_package_installs_and_translates_as_translate(
    sentencepiece_run: Path, tmp_path: Path, argos: Any, quantization: str | None
) -> None:
    package, translate = argos
    output = tmp_path / "model.argosmodel"
    export(ExportConfig(run=str(sentencepiece_run), output=str(output), format="argos", quantization=quantization))
    names = zipfile.ZipFile(output).namelist()
    folder = names[0].split("/")[0]
    assert all(name.startswith(folder + "/") for name in names)  # one folder, as Argos extracts it
    assert {f"{folder}/{n}" for n in ("metadata.json", "sentencepiece.model", "README.md", "model/model.bin")} <= set(
        names
    )
    package.install_from_path(output)
    (installed,) = package.get_installed_packages()
    assert (installed.from_code, installed.to_code) == ("src", "tgt")
    vocabulary = json.loads((installed.package_path / "model" / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert "<pad>" not in vocabulary  # Argos suppresses nothing: pad is not in the model to be output
    theirs = [translate.translate(line, "src", "tgt") for line in SENTENCEPIECE_LINES]
    # Argos decodes with beam 4 (ARGOS_BEAM_SIZE), length penalty 0.2 and CTranslate2's length limit.
    precision = "int8" if quantization else "fp32"
    ours = Translator.load(sentencepiece_run, beam=4, length_penalty=0.2, precision="fp32", device="cpu")
    expected = ours.translate(SENTENCEPIECE_LINES)
    same = sum(a == b for a, b in zip(theirs, expected, strict=True))
    assert same == len(expected) if precision == "fp32" else same >= len(expected) * 0.8, (same, precision)


def test_a_byte_level_run_is_refused_naming_the_setting(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config("train", [*TINY_TRAIN, "max_steps=2", "valid_every=2", "save_every=2"]), run_dir)
    with pytest.raises(UserError, match=r"byte-level; train with data\.tokenizer=sentencepiece$"):
        export(ExportConfig(run=str(run_dir), output=str(tmp_path / "m.argosmodel"), format="argos"))
    assert list(tmp_path.iterdir()) == [run_dir]


def test_the_file_name_is_checked_first(sentencepiece_run: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"ends in \.argosmodel"):
        export(ExportConfig(run=str(sentencepiece_run), output=str(tmp_path / "model.zip"), format="argos"))
    assert list(tmp_path.iterdir()) == []


def test_the_command_says_how_to_install_the_package(
    sentencepiece_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from seq2seq.cli.export import main as export_main

    output = tmp_path / "en_de.argosmodel"
    export_main([f"run={sentencepiece_run}", f"output={output}", "format=argos"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"wrote {output} (argos, ")
    command = shlex.split(printed[1].removeprefix("install with: ").removesuffix(" (docs/export.md)"))
    assert command == ["python", "-c", f'import argostranslate.package as p; p.install_from_path("{output}")']
    assert zipfile.is_zipfile(output)
