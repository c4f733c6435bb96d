"""Choice of torch device: `auto` means CUDA when present, else CPU.

torch is imported where it is used: fl-run reads THREADS_ENV before it imports torch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
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
# The thread pools of OpenMP (torch's CPU kernels) and of the BLAS libraries under numpy, each
# sized by its variable when the library loads. Left at their default (one thread per core) in
# every process of a simulation, they oversubscribe the cores and spin: on 2 cores a round took
# 2.4x as long as with one thread each (issue 51's measurements).
POOL_ENVS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# The cores the server's central evaluation may use: its clients wait for the round's result
# while it evaluates, so it need not stay on one thread (mnist5k's CNN on 1,000 test images,
# 2 cores: 20 -> 13 ms a round). The user's OMP_NUM_THREADS, when set, caps it.
EVAL_THREADS_ENV = "FL_EVAL_THREADS"


def thread_env(threads: int) -> dict[str, str]:
    """Environment for a process that shares the machine's cores with the run's others: torch
    and the BLAS/OpenMP pools get `threads` each, unless the user set a pool's variable; the
    server's central evaluation the machine's cores (EVAL_THREADS_ENV)."""
    pinned = os.environ.get("OMP_NUM_THREADS", "")
    cores = pinned if pinned.isdigit() else str(len(os.sched_getaffinity(0)))
    env = {THREADS_ENV: str(threads), EVAL_THREADS_ENV: cores}
    for name in POOL_ENVS:
        if name not in os.environ:
            env[name] = str(threads)
    return env


def apply_thread_limit() -> None:
    """Honour the runtime's per-client torch thread count, if it set one."""
    import torch

    threads = os.environ.get(THREADS_ENV)
    # only when it differs: setting it, even to the same count, costs the next forward and
    # backward passes ~0.1-0.2 ms (a CNN's train message, A/B on the same messages: +2 %)
    if threads and torch.get_num_threads() != int(threads):
        torch.set_num_threads(int(threads))


@contextlib.contextmanager
def evaluation_threads(configured: int | None) -> Iterator[None]:
    """torch's thread count for a central evaluation run inside: `server.torch_threads` when
    set, else the cores the runtime gave the server's evaluation (EVAL_THREADS_ENV), else as
    it is; the count before is restored after."""
    import torch

    threads = configured or int(os.environ.get(EVAL_THREADS_ENV, "0") or 0)
    before = torch.get_num_threads()
    if not threads or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
