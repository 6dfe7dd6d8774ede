"""Choosing the torch device from the `device` key (training and translation share it)."""

from __future__ import annotations

import logging
import os

import torch

from seq2seq.config import check_cuda_device, validate_device

log = logging.getLogger(__name__)
# cuBLAS's documented setting for reproducible matmuls (a fixed workspace per stream, a few MiB).
CUBLAS_DETERMINISTIC = ":4096:8"


def pick_device(name: str) -> torch.device:
    """`auto` is CUDA when present, else CPU; asking for CUDA where there is none is a one-line error."""
    validate_device(name)  # the Python API's device= comes without the config's check
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_cuda_device(name, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    return torch.device(name)


def half_precision_on_cpu(tensor: torch.Tensor) -> bool:
    """bf16/fp16 on a CPU, where PyTorch's kernels differ most from fp32 in speed (attention, oneDNN)."""
    return tensor.device.type == "cpu" and tensor.dtype in (torch.bfloat16, torch.float16)


def use_deterministic_algorithms(device: torch.device) -> None:
    """torch.use_deterministic_algorithms(True). On CUDA cuBLAS is only reproducible with
    CUBLAS_WORKSPACE_CONFIG set before its first matmul (torch raises inside the matmul otherwise):
    set here, unless the user chose a value."""
    if device.type == "cuda" and "CUBLAS_WORKSPACE_CONFIG" not in os.environ:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_DETERMINISTIC
        log.info("deterministic=true: set CUBLAS_WORKSPACE_CONFIG=%s for cuBLAS", CUBLAS_DETERMINISTIC)
    torch.use_deterministic_algorithms(True)
