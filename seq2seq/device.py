"""Choosing the torch device from the `device` key (training and translation share it)."""

from __future__ import annotations

import torch

from seq2seq.config import UserError


def pick_device(name: str) -> torch.device:
    """`auto` is CUDA when present, else CPU; asking for CUDA where there is none is a one-line error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device={name}: CUDA is not available on this machine (use device=auto or cpu)")
    return device


def half_precision_on_cpu(tensor: torch.Tensor) -> bool:
    """bf16/fp16 on a CPU, where PyTorch's kernels differ most from fp32 in speed (attention, oneDNN)."""
    return tensor.device.type == "cpu" and tensor.dtype in (torch.bfloat16, torch.float16)
