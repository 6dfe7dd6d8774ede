"""Checkpoint averaging: the mean of the weights of a run's last periodic checkpoints (`seq2seq-average`,
seq2seq/cli/average.py, is the command).

Averaging the last few checkpoints smooths the noise of the final updates and usually gains a
little BLEU for free, but only where the weights have settled: a run's last N checkpoints that reach
back into its first half are refused (see `end_of_run`). The result keeps the newest
checkpoint's config and vocabulary (so `seq2seq-translate checkpoint=...` takes it) but no optimiser
state: it is for translation.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from seq2seq.artifacts.checkpoint import AveragedCheckpoint, ModelPayload, load_checkpoint
from seq2seq.artifacts.model_files import check_same_tokenizer, load_tokenizers
from seq2seq.artifacts.run_dir import CHECKPOINTS_DIR, PERIODIC_GLOB, RunDir
from seq2seq.config import UserError
from seq2seq.data.tokenizer import Tokenizers

# What the average keeps of the newest checkpoint: its model payload but the weights (averaged), and
# the metrics of its last validation.
KEEP = tuple(key for key in ModelPayload.__annotations__ if key != "model") + ("metrics",)


def periodic_checkpoints(run_dir: Path, last: int) -> list[Path]:
    """The newest `last` step_N.pt of a run; fewer than asked is an error, as in fairseq's averaging:
    an "average" of one checkpoint is not what was asked for."""
    found = RunDir(run_dir).periodic_checkpoints()
    if not found:
        raise UserError(f"{run_dir}: no {CHECKPOINTS_DIR}/{PERIODIC_GLOB} to average")
    if len(found) < last:
        names = ", ".join(p.name for p in found)
        raise UserError(
            f"{run_dir}: last={last} asks for {last} periodic checkpoints but the run has {len(found)} "
            f"({names}); give last={len(found)} to average those"
        )
    return found[-last:]


def average(paths: list[Path]) -> AveragedCheckpoint:
    payloads = [load_checkpoint(p) for p in paths]
    configs = {json.dumps(p["config"]["model"], sort_keys=True) for p in payloads}
    if len(configs) > 1:
        raise UserError(f"{', '.join(map(str, paths))}: the checkpoints have different model configs")
    check_one_vocabulary(paths, payloads)
    newest = max(payloads, key=lambda p: p["step"])
    averaged = {}
    for name, tensor in newest["model"].items():
        stacked = torch.stack([p["model"][name].float() for p in payloads])
        averaged[name] = stacked.mean(dim=0).to(tensor.dtype)
    result = {key: newest[key] for key in KEEP if key in newest}
    result["model"] = averaged
    result["averaged_from"] = [str(p) for p in paths]
    result["averaged_steps"] = [p["step"] for p in payloads]
    return result


def check_one_vocabulary(paths: list[Path], payloads: list[dict]) -> None:
    """Weights are averaged id by id, so every checkpoint must map ids to the same tokens: the same
    vocabulary sizes and recorded tokenizer, and the same tokenizer files where they can be found (an
    ensemble's rule, seq2seq.inference.torch_model). Checkpoints copied without one are judged by the record."""
    first, first_path = payloads[0]["vocab"], paths[0]
    for path, payload in zip(paths[1:], payloads[1:], strict=True):
        vocab = payload["vocab"]
        if (vocab["src_size"], vocab["tgt_size"]) != (first["src_size"], first["tgt_size"]):
            raise UserError(
                f"{path}: its vocabularies have {vocab['src_size']}/{vocab['tgt_size']} entries, those of "
                f"{first_path} {first['src_size']}/{first['tgt_size']}: checkpoints of different runs cannot be averaged"
            )
        if None not in (vocab.get("tokenizer"), first.get("tokenizer")) and vocab["tokenizer"] != first["tokenizer"]:
            raise UserError(
                f"{path}: it was trained with another tokenizer than {first_path} (same size, other tokens): "
                "an average needs checkpoints that share one tokenizer (checkpoints of one run)"
            )
    found = [(path, tokenizers) for path in paths if (tokenizers := _tokenizers_of(path)) is not None]
    for path, tokenizers in found[1:]:
        check_same_tokenizer(tokenizers, found[0][1], path, found[0][0], what="an average")


def _tokenizers_of(checkpoint: Path) -> Tokenizers | None:
    try:
        return load_tokenizers(checkpoint, None)
    except UserError:  # none beside it or in its run directory
        return None


def newer_last(run_dir: Path, newest_step: int) -> int | None:
    """The update of last.pt when it is newer than every checkpoint averaged."""
    last = RunDir(run_dir).checkpoint("last")
    if not last.is_file():
        return None
    step = load_checkpoint(last)["step"]
    return step if step > newest_step else None


def end_of_run(run_dir: Path, paths: list[Path], force: bool) -> None:
    """Refuses an average that reaches back into the first half of the run (unless `force`).

    Averaging helps where the weights wander around one optimum, at the end of a decayed schedule
    (the Transformer paper averaged the last 5 of checkpoints written every 10 minutes of a 12-hour
    run). The first half of a run is still travelling, and an average reaching into it scored far
    below best.pt (docs/performance.md). Half the run, not a fixed number of
    updates, because runs range from minutes to days; the recipes' own averages (the final ~20%)
    are well inside it."""
    steps = [RunDir.step_of(p) for p in paths]
    final = max(steps[-1], _saved_step(RunDir(run_dir).checkpoint("last")) or 0)
    if force or min(steps) * 2 >= final:
        return
    fitting = sum(step * 2 >= final for step in steps)
    hint = f"give last={fitting}" if fitting > 1 else "train longer, or save_every smaller"
    raise UserError(
        f"{run_dir}: last={len(paths)} averages updates {min(steps)}-{steps[-1]}, reaching back into the first half "
        f"of this {final}-update run, where the weights are still far from where training ended; {hint}, "
        "or force=true to average them anyway"
    )


def _saved_step(checkpoint: Path) -> int | None:
    return load_checkpoint(checkpoint)["step"] if checkpoint.is_file() else None
