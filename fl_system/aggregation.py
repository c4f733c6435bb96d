"""Weighted averaging of client models: the arithmetic every averaging strategy shares, and
the similarity scores of uploads that TACO and FoolsGold weight by."""

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


EPS = 1e-12  # norms below this count as zero


def cosines_to_mean(uploads: np.ndarray) -> np.ndarray:
    """cos(Delta_i, mean_j Delta_j) for each row of `uploads` (clients x parameters), in
    float64; 0 for a zero row or a zero mean (no NaN). The mean is unweighted."""
    x = np.asarray(uploads, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"uploads must be a (clients, parameters) array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1)
    mean = x.mean(axis=0)
    mean_norm = float(np.linalg.norm(mean))
    cos = (x @ mean) / np.maximum(norms * mean_norm, EPS)
    cos[(norms < EPS) | (mean_norm < EPS)] = 0.0
    return cos


def normalized_or_uniform(scores: np.ndarray) -> tuple[np.ndarray, bool]:
    """(scores / sum, False), or (uniform, True) when the non-negative scores sum to <= EPS."""
    a = np.asarray(scores, dtype=np.float64)
    total = a.sum()
    if total <= EPS:
        return np.full(a.shape, 1.0 / a.size), True
    return a / total, False
