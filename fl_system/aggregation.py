"""Weighted averaging of client models: the arithmetic every averaging strategy shares."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normalized(weights: Sequence[float]) -> np.ndarray:
    """Weights scaled to sum to one; raises on a non-positive total."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"aggregation weights must be finite and non-negative, got {w.tolist()}")
    total = w.sum()
    if total <= 0:
        raise ValueError(f"aggregation weights sum to {total}; nothing to average")
    return w / total


def weighted_average(
    models: Sequence[Sequence[np.ndarray]], weights: Sequence[float]
) -> list[np.ndarray]:
    """Layer-wise sum_k w_k * models[k] with weights normalised to one.

    Accumulates in float64 and casts back to each layer's dtype. Integer layers (counters
    such as BatchNorm's num_batches_tracked) cannot be averaged meaningfully: the first
    model's value is kept.
    """
    if len(models) != len(weights) or not models:
        raise ValueError(f"{len(models)} models but {len(weights)} weights")
    p = normalized(weights)
    out: list[np.ndarray] = []
    for layer in zip(*models, strict=True):
        first = layer[0]
        if not np.issubdtype(first.dtype, np.floating):
            out.append(first.copy())
            continue
        acc = np.zeros(first.shape, dtype=np.float64)
        for pk, arr in zip(p, layer, strict=True):
            acc += pk * arr.astype(np.float64, copy=False)
        out.append(acc.astype(first.dtype))
    return out
