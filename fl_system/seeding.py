"""Seeds derived from (experiment seed, round, partition): reproducible without carrying RNG state.

Because every random choice a client makes is derived from these three numbers, a resumed run
and an uninterrupted run draw exactly the same batches.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def derive_seed(*parts: int) -> int:
    """A 32-bit seed that depends on every part (order matters)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA) in this process."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
