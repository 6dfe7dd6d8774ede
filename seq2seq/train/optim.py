"""Optimisers and learning-rate schedules."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from seq2seq.config import OptimConfig


def noam_lr(step: int, d_model: int, warmup: int, factor: float) -> float:
    """The paper's schedule (§5.3): factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then decay with the inverse square root of the step."""
    step = max(step, 1)
    return peak * min(step / warmup, (warmup / step) ** 0.5)


def schedule(cfg: OptimConfig, d_model: int) -> Callable[[int], float]:
    """Learning rate as a function of the update number (1-based)."""
    if cfg.schedule == "noam":
        return lambda step: noam_lr(step, d_model, cfg.warmup, cfg.factor)
    return lambda step: inverse_sqrt_lr(step, cfg.lr, cfg.warmup)


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimConfig, d_model: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    params = list(params)
    kwargs = {"lr": 1.0, "betas": tuple(cfg.betas), "eps": cfg.eps, "weight_decay": cfg.weight_decay}
    # foreach: one fused kernel launch per group of tensors instead of one per tensor.
    optimizer_class = torch.optim.AdamW if cfg.name == "adamw" else torch.optim.Adam
    optimizer = optimizer_class(params, foreach=True, **kwargs)
    lr_at = schedule(cfg, d_model)
    # LambdaLR multiplies the base lr (1.0) by lr_at(n + 1), n = updates done so far.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: lr_at(n + 1))
    return optimizer, scheduler
