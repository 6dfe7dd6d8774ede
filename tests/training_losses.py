"""Every update's loss and gradient norm (as float.hex, bit for bit) of a few tiny runs on data made in
code, and a digest of the final weights, as JSON: for checking that a refactoring trains exactly as
the code before it did. Not a test (pytest does not collect it): run it on both checkouts, compare.

    PYTHONPATH=<old checkout> python tests/training_losses.py > before.json
    python tests/training_losses.py > after.json && cmp before.json after.json

The runs: the built-in task; three directions of parallel files; two weighted TSV corpora with data.clean;
data.streaming; those two corpora streamed; a run resumed half-way (its losses must be the uninterrupted
run's). The JSON has a key per run: where one checkout's script has a run the other's lacks, compare the
runs both have (or run this one's on the old code, the PYTHONPATH form above).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import TINY_TRAIN, compose_config, write_multilingual_corpus  # noqa: E402


def sentence(word: str, i: int) -> str:
    return " ".join(f"{word}{(i * 7 + k) % 13}" for k in range(2 + i % 5))


def tsv(path: Path, word: str, n: int) -> str:
    path.write_text("".join(f"{sentence(word, i)}\t{sentence(word.upper(), i)}\n" for i in range(n)))
    return str(path)


def runs(root: Path) -> dict[str, list[str]]:
    corpora = root / "corpora"
    corpora.mkdir()
    multilingual = write_multilingual_corpus(root / "multilingual")
    weighted = [
        "data=tsv",
        "data.train=null",
        f"data.valid={tsv(corpora / 'valid.tsv', 'valid', 6)}",
        f"data.corpora=[{{name:a,kind:tsv,train:{tsv(corpora / 'a.tsv', 'alpha', 150)},weight:2}},"
        f"{{name:b,kind:tsv,train:{tsv(corpora / 'b.tsv', 'beta', 150)},weight:1}}]",
        "data.clean=[control_chars,length,length_ratio]",
        "data.vocab_size=300",
    ]
    return {
        "builtin": [*TINY_TRAIN],
        "multilingual": [
            *TINY_TRAIN,
            "data=parallel_files",
            "data.directions=[en-de,en-fr,de-en]",
            "data.vocab_size=320",
            *multilingual,
        ],
        "corpora": [*TINY_TRAIN, *weighted],
        "streaming": [*TINY_TRAIN, "data.streaming=true", "data.stream_buffer_pairs=150"],
        # the same corpora streamed: their passes weighted and interleaved (seq2seq.data.corpora)
        "streamed_corpora": [*TINY_TRAIN, *weighted, "data.streaming=true", "data.stream_buffer_pairs=100"],
    }


def recorded(losses: list) -> None:
    """Update.read_back, wrapped: each update's figures as it reads them back."""
    from seq2seq.train.update import Update

    read_back = Update.read_back

    def wrapped(self, pending):
        results = read_back(self, pending)
        losses.extend([r.step, r.loss.hex(), r.nll.hex(), r.grad_norm.hex(), r.skipped] for r in results)
        return results

    Update.read_back = wrapped


def weights_digest(run_dir: Path) -> str:
    import torch

    state = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=False)["model"]
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    import seq2seq
    from seq2seq.cli.train import train

    print(f"seq2seq from {Path(seq2seq.__file__).parent}", file=sys.stderr)

    logging.disable(logging.WARNING)
    losses: list = []
    recorded(losses)
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["SEQ2SEQ_CACHE"] = str(root / "cache")
        for name, overrides in runs(root).items():
            losses.clear()
            summary = train(compose_config("train", overrides), root / name, overrides=overrides)
            found[name] = {"losses": list(losses), "step": summary["step"], "weights": weights_digest(root / name)}
        # Resumed half-way: the second half's losses and the final weights must be the builtin run's.
        half = [*TINY_TRAIN, "max_steps=4"]
        train(compose_config("train", half), root / "resumed", overrides=half)
        losses.clear()
        again = [f"resume={root / 'resumed'}", "max_steps=8"]
        summary = train(compose_config("train", [*TINY_TRAIN, *again]), root / "resumed", overrides=again)
        found["resumed"] = {
            "losses": list(losses),
            "step": summary["step"],
            "weights": weights_digest(root / "resumed"),
        }
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
