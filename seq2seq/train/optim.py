"""Optimisers and learning-rate schedules."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from seq2seq.config import OptimConfig
from seq2seq.train.flat_parameters import FlatParameters


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

    It updates flat parameters (`FlatParameters`): each update is one fused kernel
    (`torch._fused_adam_` / `_fused_adamw_`, the kernels behind torch.optim's `fused=True`) over one long
    vector per device and dtype, not nine operators per parameter, nor a fused kernel looping over them.
    Every parameter is updated every step (one that no loss reached has a zero gradient). It can skip
    itself on the device (`found_inf`), so deciding that an update is not finite needs no read-back.

    Written here rather than taken from torch.optim because every torch.optim optimizer imports
    torch._dynamo the first time it is used (even without torch.compile): start-up time and memory for
    a compiler that an eager run never calls (docs/performance.md has the measurement)."""

    def __init__(
        self,
        flat: FlatParameters,
        lr_at: Callable[[int], float],
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        decoupled: bool,
    ) -> None:
        self.flat = flat
        self.lr_at = lr_at
        self.betas, self.eps, self.weight_decay, self.decoupled = betas, eps, weight_decay, decoupled
        self.updates = 0  # updates made, so the next one uses lr_at(updates + 1)
        self.last_lr: float | None = None  # what the latest update used (a time-driven rate cannot be recomputed)
        # Per flat buffer: updates made to it (a float32 tensor beside it, as the fused kernel reads it;
        # not `updates`: a skipped update does not count here) and the two moments.
        self.steps = [torch.zeros((), dtype=torch.float32, device=b.device) for b in flat.buffers]
        self.exp_avg, self.exp_avg_sq = flat.zeros_like_buffers(), flat.zeros_like_buffers()
        # GradScaler (fp16) reads the gradients through param_groups, as for a torch.optim optimizer.
        self.param_groups = [{"params": flat.buffers}]

    @property
    def lr(self) -> float:
        """The learning rate of the latest update (of the first, before any)."""
        return self.last_lr if self.last_lr is not None else self.lr_at(max(self.updates, 1))

    @property
    def state(self) -> dict[int, dict[str, torch.Tensor]]:
        """Per parameter index: its step count and its parts of the moments (views), as torch.optim
        keys them."""
        groups = [group for group, _, _ in self.flat.places]
        return {
            i: {"step": self.steps[group], "exp_avg": m, "exp_avg_sq": v}
            for i, (group, m, v) in enumerate(
                zip(groups, self.flat.views(self.exp_avg), self.flat.views(self.exp_avg_sq), strict=True)
            )
        }

    @torch.no_grad()
    def step(self, found_inf: torch.Tensor | None = None) -> None:
        """One update of every parameter. `found_inf`: a one-element float tensor on the parameters'
        device; where it is non-zero the update changes nothing (weights, moments and their step counts
        stay), decided on the device. The learning-rate schedule moves on either way, as torch's does
        under GradScaler."""
        lr, (beta1, beta2) = self.next_rate(), self.betas
        self.count_update(lr)
        fused = torch._fused_adamw_ if self.decoupled else torch._fused_adam_
        torch._foreach_add_(self.steps, 1.0)
        fused(
            self.flat.buffers,
            self.flat.gradients(),
            self.exp_avg,
            self.exp_avg_sq,
            [],
            self.steps,
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
            torch._foreach_sub_(self.steps, [found_inf.to(self.steps[0].device)] * len(self.steps))

    def next_rate(self) -> float:
        """The learning rate the next update uses (asking does not move the schedule on)."""
        return self.lr_at(self.updates + 1)

    def count_update(self, lr: float) -> None:
        """An update was made (or skipped on the device) at rate `lr`: the schedule moves on."""
        self.updates += 1
        self.last_lr = lr

    @torch.no_grad()
    def step_in_graph(self, lr: float | torch.Tensor, found_inf: torch.Tensor) -> None:
        """`step`'s arithmetic (the fused kernel's, in its order) as plain tensor operations, for
        torch.compile to fuse with the rest of the update (compile=true): to the compiler the fused
        kernel is one opaque call. `lr` is an input, not read from the schedule (a rate read inside
        would become a constant of the graph, recompiled every update): the caller takes it with
        `next_rate` and moves the schedule on with `count_update`."""
        beta1, beta2 = self.betas
        skip = found_inf != 0
        for param, grad, exp_avg, exp_avg_sq, step in zip(
            self.flat.buffers,
            [b.grad for b in self.flat.buffers],
            self.exp_avg,
            self.exp_avg_sq,
            self.steps,
            strict=True,
        ):
            new_step = step + 1.0
            if self.decoupled:
                new_param = param - lr * self.weight_decay * param
            else:
                new_param, grad = param, grad + self.weight_decay * param
            new_avg = exp_avg.lerp(grad, 1.0 - beta1)
            new_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
            denom = new_avg_sq.sqrt() / (1.0 - beta2**new_step).sqrt() + self.eps
            new_param = new_param - lr / (1.0 - beta1**new_step) * new_avg / denom
            param.copy_(torch.where(skip, param, new_param))
            exp_avg.copy_(torch.where(skip, exp_avg, new_avg))
            exp_avg_sq.copy_(torch.where(skip, exp_avg_sq, new_avg_sq))
            step.copy_(torch.where(skip, step, new_step))

    def zero_grad(self) -> None:
        self.flat.zero_grad()

    def state_dict(self) -> dict[str, Any]:
        """Per parameter index, as torch.optim writes it (the format checkpoints have always had): step
        counts as ints (one read-back, at save time) and copies of the moments, not views of the
        buffers. Before the first update the state is empty, as torch.optim's is."""
        if not any(int(step) for step in self.steps):
            return {"updates": self.updates, "state": {}}
        state = {
            i: {"step": int(s["step"]), "exp_avg": s["exp_avg"].clone(), "exp_avg_sq": s["exp_avg_sq"].clone()}
            for i, s in self.state.items()
        }
        return {"updates": self.updates, "state": state}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Also reads a torch.optim Adam/AdamW state dict (checkpoints written before this class), as
        seq2seq.artifacts.checkpoint.upgrade gives it ("updates" added). The moments are copied into the
        buffers (on the parameters' device): updating them must not change the dict they came from. A
        parameter with no entry starts from zero moments. Step counts were per parameter: they have
        always been equal in a run (every parameter has a gradient every update); the largest is kept."""
        for buffer in (*self.exp_avg, *self.exp_avg_sq, *self.steps):
            buffer.zero_()
        state = self.state
        with torch.no_grad():
            for i, entry in saved["state"].items():
                ours = state[int(i)]
                ours["exp_avg"].copy_(entry["exp_avg"])
                ours["exp_avg_sq"].copy_(entry["exp_avg_sq"])
                ours["step"].fill_(max(float(entry["step"]), float(ours["step"])))
        self.updates = saved["updates"]


def build_optimizer(
    params: FlatParameters | Iterable[torch.nn.Parameter],
    cfg: OptimConfig,
    d_model: int,
    budget_used: Callable[[int], float] | None = None,
) -> Adam:
    """Adam or AdamW (`optim.name`) following the configured learning-rate schedule, over `params`
    made flat (their values and gradients become views of its buffers) unless they are already."""
    lr_at = schedule(cfg, d_model, budget_used)
    flat = params if isinstance(params, FlatParameters) else FlatParameters(params)
    return Adam(flat, lr_at, tuple(cfg.betas), cfg.eps, cfg.weight_decay, cfg.name == "adamw")
