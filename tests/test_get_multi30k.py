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


def fake_mirror(monkeypatch: pytest.MonkeyPatch, fail_at: str, error: BaseException):
    """An urlopen stand-in serving made-up files (their SHA-256s put in the script's table) until it is
    asked for `fail_at`, which raises `error`: a download that breaks part way, without network."""
    contents = {name: f"{name} contents\n".encode() for name in get_multi30k.file_names()}
    monkeypatch.setattr(get_multi30k, "SHA256", {name: get_multi30k.sha256(data) for name, data in contents.items()})

    def opener(url: str, timeout: float) -> io.BytesIO:
        name = url.rsplit("/", 1)[1]
        if name == fail_at:
            raise error
        return io.BytesIO(contents[name])

    return opener


@pytest.mark.parametrize(
    "error", [urllib.error.URLError(TimeoutError("timed out")), KeyboardInterrupt()], ids=["network", "ctrl-c"]
)
def test_a_failed_fetch_leaves_no_folder_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error) -> None:
    """The README's `get_multi30k.py data/multi30k` on a clone without data/: a download that fails on
    its fifth file left an empty data/multi30k, and the next training said it had no train.en."""
    (tmp_path / "clone").mkdir()
    folder = tmp_path / "clone" / "data" / "multi30k"
    with pytest.raises((SystemExit, KeyboardInterrupt)):
        get_multi30k.fetch(folder, opener=fake_mirror(monkeypatch, get_multi30k.file_names()[4], error))
    assert list((tmp_path / "clone").iterdir()) == []  # neither data/ nor data/multi30k, nor a temporary folder


def test_a_failed_fetch_into_the_user_s_folder_leaves_it_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "multi30k"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    names = get_multi30k.file_names()
    opener = fake_mirror(monkeypatch, names[7], urllib.error.URLError("no route"))
    with pytest.raises(SystemExit, match=rf"cannot fetch .*{names[7]}: no route"):
        get_multi30k.fetch(folder, opener=opener)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["multi30k"]
    assert [p.name for p in folder.iterdir()] == ["notes.txt"] and (folder / "notes.txt").read_text() == "mine"


def test_a_complete_fetch_moves_every_file_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opener = fake_mirror(monkeypatch, "none", OSError())
    folder = tmp_path / "data" / "multi30k"
    assert sorted(get_multi30k.fetch(folder, opener=opener)) == sorted(get_multi30k.file_names())
    assert sorted(p.name for p in folder.iterdir()) == sorted(get_multi30k.file_names())
    assert [p.name for p in tmp_path.iterdir()] == ["data"] and [p.name for p in (tmp_path / "data").iterdir()] == [
        "multi30k"
    ]
    assert all(get_multi30k.sha256(p.read_bytes()) == get_multi30k.SHA256[p.name] for p in folder.iterdir())
    mode = folder.stat().st_mode & 0o777
    assert mode == (tmp_path / "data").stat().st_mode & 0o777  # as mkdir makes a folder, not mkdtemp's 0700
