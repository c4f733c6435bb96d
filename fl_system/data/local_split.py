"""A client's own train/test split for per-client evaluation (EFL spec 5): stratified by label,
seeded by (seed, partition), so every run and every restart of a client splits alike."""

from __future__ import annotations

import math

import numpy as np


def stratified_split(
    y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train positions, test positions), both increasing: of each label's n_c examples,
    round(test_fraction n_c) go to test (half rounds up), chosen by a permutation from `seed`.
    A label with one example stays in training."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    rng = np.random.default_rng(seed)
    y = np.asarray(y)
    test: list[np.ndarray] = []
    for label in np.unique(y):
        where = np.flatnonzero(y == label)
        count = min(math.floor(test_fraction * where.size + 0.5), where.size - 1)
        test.append(rng.permutation(where)[:count])
    held = np.sort(np.concatenate(test)) if test else np.array([], dtype=np.int64)
    mask = np.ones(y.size, dtype=bool)
    mask[held] = False
    return np.flatnonzero(mask), held.astype(np.int64)
