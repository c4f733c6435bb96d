"""Choice of torch device: `auto` means CUDA when present, else CPU."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """`auto`, `cpu`, `cuda` or `cuda:N`; asking for CUDA on a machine without it is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{name}' requested but CUDA is not available on this machine")
    return device


THREADS_ENV = "FL_TORCH_THREADS"  # set by a runtime that packs several clients on few cores


def apply_thread_limit() -> None:
    """Honour the runtime's per-client torch thread count, if it set one."""
    import os

    threads = os.environ.get(THREADS_ENV)
    if threads:
        torch.set_num_threads(int(threads))
