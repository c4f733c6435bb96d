"""Corrupted clients for attack studies: applied on the client, so the server sees only behaviour.

label_shift relabels every sample l -> (l + shift) mod C; noise replaces every input with
U(-1, 1) draws of the same shape (FedGSNR's attack study, spec section 5 v).
"""

from __future__ import annotations

import numpy as np

KINDS = ("label_shift", "noise")


def corrupt(
    x: np.ndarray, y: np.ndarray, *, kind: str, shift: int, num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """New (x, y) for a corrupted partition; the inputs given are left untouched."""
    if kind == "label_shift":
        return x, (np.asarray(y) + shift) % num_classes
    if kind == "noise":
        rng = np.random.default_rng(seed)
        return rng.uniform(-1.0, 1.0, size=x.shape).astype(x.dtype), y
    raise ValueError(f"clients.corrupt.kind must be one of {', '.join(KINDS)}, got {kind!r}")
