"""Seeds derived from (experiment seed, round, partition): reproducible without carrying RNG state.

Because every random choice a client makes is derived from these three numbers, a resumed run
and an uninterrupted run draw exactly the same batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 32-bit seed that depends on every part (order matters)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def seed_torch(seed: int) -> None:
    """torch's generators seeded as `torch.manual_seed` seeds them. Without an accelerator
    only the CPU generator is: `torch.manual_seed` then queues the seeding of CUDA and XPU
    for an initialisation that never comes, formatting the caller's stack each time (about
    0.2 ms at a ClientApp's depth, once per client and round)."""
    import torch

    if torch.cuda.is_available() or torch.xpu.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


@contextlib.contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """torch's CPU generator seeded with `seed` inside, restored after: a seeded draw (the
    initial model) that leaves no process-wide generator seeded. NumPy's and Python's global
    generators are never seeded here: Flower's DP code has drawn noise from NumPy's."""
    import torch  # here: fl-run's config checks import this module and need no torch

    with torch.random.fork_rng(devices=[]):
        seed_torch(seed)
        yield
