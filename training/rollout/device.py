"""The one device resolver and the default dtype of a device (torch only: cheap to import before any model)."""

from __future__ import annotations

import torch

from training.errors import UserInputError


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" picks CUDA when available, else CPU; a CUDA device asked for on a machine without one is a
    one-line ``UserInputError``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserInputError(f"device {device} was asked for but no CUDA device is available; use auto or cpu")
    return torch.device(device)


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, float32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32
