"""What a run computes in: precision=auto made concrete at the run's start, and on a resume the
precision its checkpoint recorded, narrated as what auto chose then (not "as asked": no one asked)."""

from __future__ import annotations

import dataclasses

import torch

from seq2seq.artifacts.checkpoint import TrainingState
from seq2seq.precision import PrecisionChoice, choose_precision
from seq2seq.train.distributed import DistContext


def choose_run_precision(
    asked: str, d_model: int, ffn_dim: int, device: torch.device, dist: DistContext
) -> PrecisionChoice:
    """precision=`asked` made concrete: auto becomes what this machine runs a model of that width
    (model.d_model, model.ffn_dim) fastest in. Ranks measure alike but could disagree when close: rank 0
    decides."""
    choice = choose_precision(asked, device, d_model, ffn_dim)
    return dataclasses.replace(choice, precision=dist.broadcast(choice.precision))


def resumed_precision(asked: str, choice: PrecisionChoice, state: TrainingState) -> tuple[str, PrecisionChoice]:
    """(what the user asked for, the choice with its reason) of a run resumed from `state`: a resumed
    run computes in the precision its config recorded, which for precision=auto is what auto chose at
    the run's start. A precision changed on the resume's command line is chosen now, as logged."""
    if choice.precision != state.config["precision"]:
        return asked, choice
    saved = state.precision_choice
    if saved is None:
        reason = "as the run's checkpoint recorded it"
    elif saved["asked"] != choice.precision:
        asked, reason = saved["asked"], f"precision={saved['asked']} chose it when the run started: {saved['reason']}"
    else:
        return asked, choice
    return asked, dataclasses.replace(choice, reason=f"resumed; {reason}")
