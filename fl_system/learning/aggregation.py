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


EPS = 1e-12  # scores (in [0, 1]) summing to less than this count as all zero


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Each row of `x` divided by its L2 norm, in float64; a zero row stays zero.

    Scale-free: a row is first divided by its largest magnitude, so neither squaring tiny
    entries (underflow) nor huge ones (overflow) changes the direction, at any finite scale.
    """
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    peak = np.abs(rows).max(axis=1, keepdims=True)
    scaled = rows / np.where(peak > 0, peak, 1.0)
    norms = np.linalg.norm(scaled, axis=1, keepdims=True)
    return scaled / np.where(norms > 0, norms, 1.0)


def relative_norms(x: np.ndarray) -> np.ndarray:
    """The L2 norm of each row of `x` divided by the largest magnitude in `x`: the rows'
    norms up to one common factor, so their ratios are exact at any scale."""
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    peak = float(np.abs(rows).max()) if rows.size else 0.0
    return np.linalg.norm(rows / (peak if peak > 0 else 1.0), axis=1)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """cos(a, b) of two vectors at any scale; 0 when either is zero."""
    return float(unit_rows(a)[0] @ unit_rows(b)[0])


def cosines_to_mean(uploads: np.ndarray) -> np.ndarray:
    """cos(Delta_i, mean_j Delta_j) for each row of `uploads` (clients x parameters), in
    float64 and at any scale; 0 for a zero row or a zero mean (no NaN). The mean is
    unweighted; it is taken over the uploads divided by their largest magnitude (the same
    direction, without overflow)."""
    x = np.asarray(uploads, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1:
        raise ValueError(f"uploads must be a (clients, parameters) array, got shape {x.shape}")
    peak = float(np.abs(x).max()) if x.size else 0.0
    mean = (x / (peak if peak > 0 else 1.0)).mean(axis=0)
    return unit_rows(x) @ unit_rows(mean)[0]


def normalized_or_uniform(scores: np.ndarray) -> tuple[np.ndarray, bool]:
    """(scores / sum, False), or (uniform, True) when the non-negative scores sum to <= EPS."""
    a = np.asarray(scores, dtype=np.float64)
    total = a.sum()
    if total <= EPS:
        return np.full(a.shape, 1.0 / a.size), True
    return a / total, False
