"""Fetch Multi30k (task 1, raw, gzipped) into a folder of your choice, for `data=multi30k data.dir=<folder>`.

    python scripts/get_multi30k.py data/multi30k

The train, val and test_2016_flickr splits in English, German, French and Czech (12 files, about 5 MB), from
the Multi30k repository on GitHub (multi30k/dataset, data/task1/raw/), each checked against its SHA-256.
Files already there with the right contents are kept; nothing else in the folder is touched, and a
failed fetch leaves the folder as it was. Standard
library only, so it runs before the project is installed.

The data is for non-commercial research and education; cite Elliott et al. (2016), "Multi30K: Multilingual
English-German Image Descriptions", and Elliott et al. (2017) for French.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.request
from pathlib import Path

BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"

# The splits seq2seq/data/corpus.py reads (MULTI30K_SPLITS) in every language Multi30k has them;
# tests/test_get_multi30k.py holds the two lists equal.
SPLITS = ("train", "val", "test_2016_flickr")
LANGUAGES = ("en", "de", "fr", "cs")

SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
}


def file_names() -> list[str]:
    return [f"{split}.{lang}.gz" for split in SPLITS for lang in LANGUAGES]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch(folder: Path, opener=urllib.request.urlopen) -> list[str]:
    """Download the files missing from `folder` (or whose contents differ); returns the names written.

    They are downloaded into a temporary folder beside `folder` and moved in once every one has arrived
    and been checked, so a failed or interrupted fetch leaves `folder` as it was (a new folder, and the
    parents made for it, are not left behind empty: the next training would say it has no train.en)."""
    missing = [name for name in file_names() if not _is_right(folder / name)]
    if not missing:
        return []
    made = [parent for parent in reversed(folder.parents) if not parent.exists()]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.partial-"))
    try:
        for name in missing:
            (staging / name).write_bytes(download(name, opener))
        if folder.exists():  # the user's folder: only our files go into it
            for name in missing:
                os.replace(staging / name, folder / name)
        else:  # a new folder appears whole, in one rename
            staging.chmod(0o777 & ~_umask())  # mkdtemp made it private
            staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for parent in reversed(made):  # innermost first; only if still empty (rmdir refuses otherwise)
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return missing


def _is_right(path: Path) -> bool:
    return path.is_file() and sha256(path.read_bytes()) == SHA256[path.name]


def download(name: str, opener) -> bytes:
    """The file's bytes, checked against its SHA-256; a one-line SystemExit where they cannot be had."""
    try:
        with opener(BASE_URL + name, timeout=60) as response:
            data = response.read()
    except OSError as err:  # urllib's URLError and HTTPError are OSErrors
        raise SystemExit(f"error: cannot fetch {BASE_URL + name}: {getattr(err, 'reason', err)}") from None
    if sha256(data) != SHA256[name]:
        raise SystemExit(f"error: {BASE_URL + name}: unexpected contents (SHA-256 {sha256(data)}); nothing written")
    return data


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where to put the files (created if missing); any folder")
    args = parser.parse_args(argv)
    try:
        written = fetch(args.folder)
    except OSError as err:  # the folder cannot be made or written
        raise SystemExit(f"error: {args.folder}: {err.strerror or err}") from None
    print(f"{args.folder}: {len(written)} files fetched, {len(file_names()) - len(written)} already there")
    print(f"train with:  seq2seq-train experiment=multi30k_quick data.dir={args.folder}")


if __name__ == "__main__":
    sys.exit(main())
