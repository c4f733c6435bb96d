"""Choice of torch device: `auto` means CUDA when present, else CPU.

torch is imported where it is used: fl-run reads THREADS_ENV before it imports torch.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def resolve_device(name: str) -> torch.device:
    """`auto`, `cpu`, `cuda` or `cuda:N`; asking for CUDA on a machine without it is an error."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{name}' requested but CUDA is not available on this machine")
    return device


THREADS_ENV = "FL_TORCH_THREADS"  # set by a runtime that packs several clients on few cores


def apply_thread_limit() -> None:
    """Honour the runtime's per-client torch thread count, if it set one."""
    import torch

    threads = os.environ.get(THREADS_ENV)
    if threads:
        torch.set_num_threads(int(threads))
