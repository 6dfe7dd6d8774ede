"""Optimisers and learning-rate schedules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

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


def linear_to_zero_lr(step: int, peak: float, warmup: int, budget_used: float) -> float:
    """Linear warmup to `peak`, and a line from `peak` down to zero at the end of the budget; the rate
    is the lower of the two. `budget_used` is the fraction of the run's budget (time or updates) spent
    when the update starts. A run of fixed length ends better annealed to zero than cut off on an
    inverse-sqrt tail (Li et al. 2020, "Budgeted Training")."""
    step = max(step, 1)
    return peak * max(0.0, min(step / warmup, 1.0 - budget_used))


def schedule(
    cfg: OptimConfig, d_model: int, budget_used: Callable[[int], float] | None = None
) -> Callable[[int], float]:
    """Learning rate as a function of the update number (1-based). linear_to_zero also needs
    `budget_used(step)`: the fraction of the run's budget spent when that update starts."""
    if cfg.schedule == "noam":
        return lambda step: noam_lr(step, d_model, cfg.warmup, cfg.factor)
    if cfg.schedule == "linear_to_zero":
        if budget_used is None:
            raise ValueError("the linear_to_zero schedule needs the run's budget (budget_used)")
        return lambda step: linear_to_zero_lr(step, cfg.lr, cfg.warmup, budget_used(step))
    return lambda step: inverse_sqrt_lr(step, cfg.lr, cfg.warmup)


class Adam:
    """Adam (Kingma & Ba) with its weight decay either decoupled from the gradient (AdamW, Loshchilov
    & Hutter) or added to it (L2, `decoupled=False`): the arithmetic of torch.optim.AdamW / Adam with
    their defaults (tests compare them step by step). Update n uses the learning rate `lr_at(n)`, so
    warmup and decay need no scheduler object.

    Each update is one fused kernel over all parameters (`torch._fused_adam_` / `_fused_adamw_`, the
    kernels behind torch.optim's `fused=True`), not nine operators per parameter: on a GPU every
    operator is a kernel launch. It can skip itself on the device (`found_inf`), so deciding that an
    update is not finite needs no read-back to the host.

    Written here rather than taken from torch.optim because every torch.optim optimizer imports
    torch._dynamo the first time it is used (even without torch.compile): start-up time and memory for
    a compiler that an eager run never calls (docs/performance.md has the measurement)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr_at: Callable[[int], float],
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        decoupled: bool,
    ) -> None:
        self.params = list(params)
        self.lr_at = lr_at
        self.betas, self.eps, self.weight_decay, self.decoupled = betas, eps, weight_decay, decoupled
        self.updates = 0  # updates made, so the next one uses lr_at(updates + 1)
        self.last_lr: float | None = None  # what the latest update used (a time-driven rate cannot be recomputed)
        # Per parameter index: step (a float32 tensor beside the parameter, as the fused kernel reads
        # it), exp_avg, exp_avg_sq. Made on a parameter's first gradient.
        self.state: dict[int, dict[str, torch.Tensor]] = {}
        # GradScaler (fp16) reads the gradients through param_groups, as for a torch.optim optimizer.
        self.param_groups = [{"params": self.params}]

    @property
    def lr(self) -> float:
        """The learning rate of the latest update (of the first, before any)."""
        return self.last_lr if self.last_lr is not None else self.lr_at(max(self.updates, 1))

    @torch.no_grad()
    def step(self, found_inf: torch.Tensor | None = None) -> None:
        """One update of every parameter that has a gradient (the others are left alone, as in
        torch.optim). `found_inf`: a one-element float tensor on the parameters' device; where it is
        non-zero the update changes nothing (weights, moments and their step counts stay), decided on
        the device. The learning-rate schedule moves on either way, as torch's does under GradScaler."""
        self.updates += 1
        lr, (beta1, beta2) = self.lr_at(self.updates), self.betas
        self.last_lr = lr
        groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
        for index, param in enumerate(self.params):
            if param.grad is not None:
                groups.setdefault((param.device, param.dtype), []).append(index)
        fused = torch._fused_adamw_ if self.decoupled else torch._fused_adam_
        for indices in groups.values():
            states = [self._state(i) for i in indices]
            steps = [s["step"] for s in states]
            torch._foreach_add_(steps, 1.0)
            fused(
                [self.params[i] for i in indices],
                [self.params[i].grad for i in indices],
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [],
                steps,
                lr=lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=self.weight_decay,
                eps=self.eps,
                amsgrad=False,
                maximize=False,
                grad_scale=None,
                found_inf=found_inf,
            )
            if found_inf is not None:  # the kernel skipped: its step counts go back
                torch._foreach_sub_(steps, [found_inf.to(steps[0].device)] * len(steps))

    def _state(self, index: int) -> dict[str, torch.Tensor]:
        if index not in self.state:
            param = self.params[index]
            self.state[index] = {
                "step": torch.zeros((), dtype=torch.float32, device=param.device),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }
        return self.state[index]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """Step counts as ints (the format checkpoints have always had): one read-back, at save time."""
        return {
            "updates": self.updates,
            "state": {i: {**s, "step": int(s["step"])} for i, s in self.state.items()},
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Also reads a torch.optim Adam/AdamW state dict (checkpoints written before this class), as
        seq2seq.artifacts.checkpoint.upgrade gives it ("updates" added). The moments are copied to
        their parameter's device (checkpoints are loaded on the CPU) and are copies in any case:
        updating them in place must not change the dict they came from."""
        self.state = {}
        for i, entry in saved["state"].items():
            param = self.params[int(i)]
            self.state[int(i)] = {
                "step": torch.tensor(float(entry["step"]), dtype=torch.float32, device=param.device),
                "exp_avg": entry["exp_avg"].to(param, copy=True),
                "exp_avg_sq": entry["exp_avg_sq"].to(param, copy=True),
            }
        self.updates = saved["updates"]


def build_optimizer(
    params: Iterable[torch.nn.Parameter],
    cfg: OptimConfig,
    d_model: int,
    budget_used: Callable[[int], float] | None = None,
) -> Adam:
    """Adam or AdamW (`optim.name`) following the configured learning-rate schedule."""
    lr_at = schedule(cfg, d_model, budget_used)
    return Adam(params, lr_at, tuple(cfg.betas), cfg.eps, cfg.weight_decay, cfg.name == "adamw")
