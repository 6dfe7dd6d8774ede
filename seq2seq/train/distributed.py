"""torch.distributed set-up for runs under torchrun; a no-op for a single process."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("seq2seq.train")


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")  # where collective tensors live (CUDA for NCCL)
    wait_group: Any = None  # gloo group with the long timeout, for waiting on rank 0 (see wait_for_main)
    joined: bool = False  # in a process group (torchrun), even one of a single rank

    @property
    def enabled(self) -> bool:
        return self.joined

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def wait_for_main(self) -> None:
        """The barrier where the other ranks wait while rank 0 works alone (tokenizer training,
        tokenizing, validation): on a gloo group of its own whose timeout is dist_wait_minutes, not the
        dist_timeout_minutes every other collective (and NCCL's watchdog) keeps."""
        if self.enabled:
            dist.barrier(group=self.wait_group)

    def sum(self, value: float) -> float:
        """Sum of `value` over all ranks."""
        if not self.enabled:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return float(tensor.item())

    def sum_in_place(self, tensor: torch.Tensor) -> None:
        """`tensor` replaced by its sum over all ranks (a gradient buffer: no copy of it is made)."""
        if self.enabled:
            dist.all_reduce(tensor)

    def broadcast_in_place(self, tensor: torch.Tensor) -> None:
        """`tensor` replaced by rank 0's."""
        if self.enabled:
            dist.broadcast(tensor, src=0)

    def sum_on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` summed over all ranks, on its own device, without the host waiting for the result:
        the all-reduce is queued behind the work that makes `tensor` (NCCL runs it on the GPU)."""
        if not self.enabled:
            return tensor
        reduced = tensor.to(self.device, copy=True)
        dist.all_reduce(reduced)
        return reduced.to(tensor.device)

    def any_of(self, flags: list[bool]) -> list[bool]:
        """For each flag: true on every rank if it is true on any, in one all-reduce for all of them
        (each collective waits for the slowest rank and reads back to the host)."""
        if not self.enabled:
            return list(flags)
        tensor = torch.tensor([float(f) for f in flags], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return [value > 0 for value in tensor.tolist()]

    def any(self, flag: bool) -> bool:
        """True on every rank if it is true on any (stop signals, time budgets)."""
        return self.sum(float(flag)) > 0

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank (small picklable objects; over the gloo
        group, so CPU tensors stay on the CPU)."""
        if not self.enabled:
            return [value]
        values: list[Any] = [None] * self.world_size
        dist.all_gather_object(values, value, group=self.wait_group)
        return values

    def broadcast(self, value: Any) -> Any:
        """rank 0's `value` on every rank."""
        if not self.enabled:
            return value
        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]


def init_distributed(device: torch.device, timeout_minutes: float = 10.0, wait_minutes: float = 360.0) -> DistContext:
    """Joins the process group torchrun describes in the environment (RANK, WORLD_SIZE, ...).
    On CUDA each process takes GPU LOCAL_RANK, whatever `device` names (device=cuda:0 would put every
    rank on GPU 0), before any collective: NCCL's object collectives run on the current device, 0 on
    every rank until it is set ("Duplicate GPU detected"). Collectives go over NCCL on CUDA, else gloo.

    Under torchrun a single rank joins a group too (DDP over a group of one): `torchrun
    --nproc_per_node=1` then runs what eight GPUs run, so one GPU can check the multi-GPU path."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1 and "TORCHELASTIC_RUN_ID" not in os.environ:  # a plain process, not torchrun's
        return DistContext()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    options: dict[str, Any] = {}
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        options["device_id"] = device  # binds the communicator to this GPU at once
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=timeout_minutes), **options)
    wait_group = dist.new_group(backend="gloo", timeout=timedelta(minutes=wait_minutes))
    context = DistContext(dist.get_rank(), dist.get_world_size(), local_rank, device, wait_group, joined=True)
    log.info("distributed: rank %d of %d, %s backend", context.rank, context.world_size, backend)
    return context


def cleanup_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# What gloo and NCCL say when a peer stops answering (hung, killed, out of memory): a collective's
# timeout, or the peer's socket closing under it.
LOST_PEER_SIGNS = ("Timed out", "timed out", "Connection closed by peer", "Connection reset by peer", "Watchdog")


def lost_peer(error: BaseException, ctx: DistContext) -> bool:
    """`error` is a collective that failed because another rank stopped answering."""
    return ctx.enabled and (isinstance(error, dist.DistError) or any(sign in str(error) for sign in LOST_PEER_SIGNS))


def lost_peer_message(error: BaseException, ctx: DistContext, timeout_minutes: float, run_dir: str) -> str:
    """One line for the rank that survived: who stopped answering, how long it waited, and how to go on."""
    others = [r for r in range(ctx.world_size) if r != ctx.rank]
    who = f"rank {others[0]}" if len(others) == 1 else f"one of ranks {', '.join(map(str, others))}"
    cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (
        f"rank {ctx.rank}: {who} stopped answering (hung, killed or out of memory) and this rank waited "
        f"dist_timeout_minutes={timeout_minutes:g} for it ({cause}); the checkpoints saved so far are in "
        f"{run_dir}/checkpoints: continue with torchrun ... seq2seq-train resume={run_dir}"
    )
