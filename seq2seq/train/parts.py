"""What each part of training reads of the run's config, taken out of it once: the model to build,
the batches, the update and the loop. command.py makes them from the config a run trains with (its plan's,
after recipe= and compile=) and hands each part to the object that reads it; recipe=auto's timing
makes them from each candidate's config. None of them edits or keeps the config itself.

    TrainingParts.of(cfg, device)
        .model     model.*, freeze=, trainable_top_layers=: the network (update.training_model)
        .batches   batch_tokens, seed, widths, accum_steps: the batch stream (update.training_batches)
        .update    the objective, the optimiser, clipping, compiling (update.Update)
        .loop      when the Trainer logs, validates, saves and stops; the config its checkpoints record
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from seq2seq.config import as_dict, compiles
from seq2seq.data.tokenizer import decoder_start_id


@dataclass(frozen=True)
class ModelParts:
    """The network a run trains: model.* (as build_model reads it) and the parts left as they came."""

    config: Any  # model.*
    freeze: tuple[str, ...]
    trainable_top_layers: int | None


@dataclass(frozen=True)
class BatchParts:
    """How the training pairs become batches: tokens per batch, the shuffle's seed, the longest row,
    the decoder's first token, widths rounded to a multiple, and the micro-batches of an update."""

    batch_tokens: int
    seed: int
    max_positions: int
    start_id: int
    pad_multiple: int
    accum_steps: int


@dataclass(frozen=True)
class UpdateParts:
    """What one update is made of: the objective's smoothing and R-Drop, optim.*, the model width the
    schedule reads, and whether (and how) it is compiled."""

    label_smoothing: float
    rdrop_alpha: float
    optim: Any  # optim.*
    d_model: int
    compiled: bool  # compile=true (auto was decided before the parts were made)
    compile_mode: str | None  # torch.compile's mode; None: its default


@dataclass(frozen=True)
class LoopParts:
    """What the Trainer's loop reads: when it logs, validates and saves, when it stops, what it shows."""

    log_every: int
    valid_every: int
    save_every: int
    keep_checkpoints: int
    valid_max_sentences: int | None
    batch_tokens: int  # the validation loss's batches
    accum_steps: int
    max_steps: int | None
    max_epochs: int | None
    max_minutes: float | None
    patience: int | None
    target: float | None
    target_metric: str
    best_metric: str
    max_skipped_updates: int
    attention_images: bool
    attention_images_share: float
    progress: bool
    seed: int
    deterministic: bool
    precision: str  # as asked (auto included): a resume says what auto chose
    record: dict[str, Any]  # the config as its checkpoints and the dashboard record it


@dataclass(frozen=True)
class TrainingParts:
    model: ModelParts
    batches: BatchParts
    update: UpdateParts
    loop: LoopParts

    @classmethod
    def of(cls, cfg: Any, device: torch.device, compiled: bool | None = None) -> TrainingParts:
        """The parts of the training config `cfg` (a TrainConfig or Hydra's) on `device`; `compiled`: the
        update compiled or not whatever compile= says (compile=auto's probes time both). Widths are
        padded to multiples of 8 where compiled code runs on a GPU (few shapes to compile for); elsewhere
        padding is compute spent on nothing: Multi30k's short sentences gain about a quarter in tokens
        (docs/performance.md)."""
        m = cfg.model
        compiled = compiles(cfg) if compiled is None else compiled
        multiple = cfg.pad_to_multiple or (8 if device.type == "cuda" and compiled else 1)
        mode = None if cfg.compile_mode == "default" else cfg.compile_mode
        return cls(
            model=ModelParts(m, tuple(cfg.freeze or ()), cfg.trainable_top_layers),
            batches=BatchParts(
                cfg.batch_tokens,
                cfg.seed,
                m.max_positions,
                decoder_start_id(m.decoder_start),
                multiple,
                cfg.accum_steps,
            ),
            update=UpdateParts(cfg.label_smoothing, cfg.rdrop_alpha, cfg.optim, m.d_model, compiled, mode),
            loop=LoopParts(
                log_every=cfg.log_every,
                valid_every=cfg.valid_every,
                save_every=cfg.save_every,
                keep_checkpoints=cfg.keep_checkpoints,
                valid_max_sentences=cfg.valid_max_sentences,
                batch_tokens=cfg.batch_tokens,
                accum_steps=cfg.accum_steps,
                max_steps=cfg.max_steps,
                max_epochs=cfg.max_epochs,
                max_minutes=cfg.max_minutes,
                patience=cfg.patience,
                target=cfg.target,
                target_metric=cfg.target_metric,
                best_metric=cfg.best_metric,
                max_skipped_updates=cfg.max_skipped_updates,
                attention_images=cfg.attention_images,
                attention_images_share=cfg.attention_images_share,
                progress=cfg.progress,
                seed=cfg.seed,
                deterministic=cfg.deterministic,
                precision=cfg.precision,
                record=as_dict(cfg),
            ),
        )
