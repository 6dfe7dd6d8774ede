"""scripts/get_multi30k.py: the files it fetches are the ones data=multi30k reads (no network: the
downloads are served from the shared copy of Multi30k, or refused)."""

from __future__ import annotations

import io
import urllib.error
from pathlib import Path

import pytest
from conftest import MULTI30K, MULTI30K_MISSING
from script_module import load_script

from seq2seq.config import DataConfig
from seq2seq.data.corpus import MULTI30K_SPLITS, iter_multi30k, unzip

get_multi30k = load_script("get_multi30k")


def serve_from(folder: Path, requested: list[str]):
    """An urlopen stand-in answering each URL with the file of the same name in `folder`."""

    def opener(url: str, timeout: float) -> io.BytesIO:
        assert url.startswith("https://raw.githubusercontent.com/multi30k/dataset/")
        name = url.rsplit("/", 1)[1]
        requested.append(name)
        return io.BytesIO((folder / name).read_bytes())

    return opener


def test_the_file_list_is_every_split_corpus_reads_in_every_language():
    expected = {f"{split}.{lang}.gz" for split in MULTI30K_SPLITS.values() for lang in ("en", "de", "fr", "cs")}
    assert set(get_multi30k.file_names()) == expected == set(get_multi30k.SHA256)
    if MULTI30K is not None:  # the copy the project's own tests and benchmarks read
        assert {p.name for p in MULTI30K.glob("*.gz")} == expected


def test_fetched_files_train_every_language_pair(tmp_path):
    if MULTI30K is None:
        pytest.skip(MULTI30K_MISSING)
    requested: list[str] = []
    folder = tmp_path / "new" / "multi30k"
    written = get_multi30k.fetch(folder, opener=serve_from(MULTI30K, requested))
    assert sorted(written) == sorted(requested) == sorted(get_multi30k.file_names())
    assert sorted(p.name for p in folder.iterdir()) == sorted(written)  # no temporary file left behind
    for src, tgt in (("en", "de"), ("fr", "cs")):
        cfg = DataConfig(kind="multi30k", dir=str(folder), src_lang=src, tgt_lang=tgt)
        corpus = {split: unzip(iter_multi30k(cfg, split)) for split in MULTI30K_SPLITS}
        assert {split: len(pairs[0]) for split, pairs in corpus.items()} == {
            "train": 29000,
            "valid": 1014,
            "test": 1000,
        }
    # Run again: every file is already there and right, so nothing is downloaded.
    requested.clear()
    assert get_multi30k.fetch(folder, opener=serve_from(MULTI30K, requested)) == [] and requested == []


def test_a_download_with_other_contents_is_refused_and_not_written(tmp_path):
    source = tmp_path / "mirror"
    source.mkdir()
    for name in get_multi30k.file_names():
        (source / name).write_bytes(b"not multi30k")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("kept")
    with pytest.raises(SystemExit, match=r"train\.en\.gz: unexpected contents"):
        get_multi30k.fetch(tmp_path / "out", opener=serve_from(source, []))
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine.txt"]


def test_an_unreachable_host_is_a_one_line_error_naming_the_url(tmp_path):
    def unreachable(url: str, timeout: float):
        raise urllib.error.URLError(OSError(-2, "Name or service not known"))

    with pytest.raises(SystemExit) as caught:
        get_multi30k.fetch(tmp_path, opener=unreachable)
    message = str(caught.value)
    assert message.startswith(f"error: cannot fetch {get_multi30k.BASE_URL}train.en.gz: ") and "\n" not in message
    assert list(tmp_path.iterdir()) == []
