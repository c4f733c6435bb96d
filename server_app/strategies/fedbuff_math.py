"""FedBuff's server step (Nguyen et al., AISTATS 2022, Algorithm 1) on plain arrays.

A client starts from the server's model at some version, x_tau, trains to y_i and its update
Delta_i = x_tau - y_i joins the buffer weighted by s_i = s(staleness); after K updates the
server steps

    x+ = x - eta * sum_i p_i s_i Delta_i = x + sum_i c_i (y_i - x_tau_i),   c_i = eta p_i s_i

with p_i the buffer's weights normalised to one (the paper's 1/K when all are equal; data
sizes, or Disco's, as FedAvg's). It is computed as

    x+ = sum_i c_i y_i + sum_i c_i (x - x_tau_i) + (1 - eta sum_i s_i p_i) x

where an update that started from x (staleness 0) has no drift term and the last coefficient
is exactly 0 when eta = 1 and every s_i = 1: a buffer of every client, all fresh, is then
FedAvg's weighted average to the bit (`weighted_average`'s sum, in its order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fl_system.learning.aggregation import normalized
from fl_system.learning.robust import Layers


def _checked_buffer(
    models: Sequence[Layers],
    starts: Sequence[Layers | None],
    weights: Sequence[float],
    scales: Sequence[float],
) -> tuple[np.ndarray, np.ndarray]:
    """The buffer's weights and staleness scales as arrays, once it is whole: one model,
    start, weight and scale per update, the scales finite and >= 0."""
    if not len(models) == len(starts) == len(weights) == len(scales) or not models:
        raise ValueError(
            f"{len(models)} models, {len(starts)} starts, {len(weights)} weights and "
            f"{len(scales)} staleness scales: one of each per buffered update"
        )
    s = np.asarray(scales, dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"staleness scales must be finite and >= 0, got {s.tolist()}")
    return np.asarray(weights, dtype=np.float64), s


def fedbuff_step(
    current: Sequence[np.ndarray],
    models: Sequence[Sequence[np.ndarray]],
    starts: Sequence[Sequence[np.ndarray] | None],
    weights: Sequence[float],
    scales: Sequence[float],
    eta: float,
) -> list[np.ndarray]:
    """x+ from the current model x, the buffered models y_i, the model each started from
    (None: x itself), their weights p_i (normalised here) and staleness scales s_i."""
    w, s = _checked_buffer(models, starts, weights, scales)
    coefficients = eta * s * normalized(w)
    rest = 1.0 - eta * float((s * w).sum() / w.sum())
    out: list[np.ndarray] = []
    for index, x in enumerate(current):
        if not np.issubdtype(x.dtype, np.floating):
            out.append(x.copy())  # counters (BatchNorm's batches seen) are not stepped
            continue
        acc = np.zeros(x.shape, dtype=np.float64)
        for c, model in zip(coefficients, models, strict=True):
            acc += c * model[index].astype(np.float64, copy=False)
        x64 = x.astype(np.float64, copy=False)
        for c, start in zip(coefficients, starts, strict=True):
            if start is not None:
                acc += c * (x64 - start[index].astype(np.float64, copy=False))
        if rest != 0.0:
            acc += rest * x64
        out.append(acc.astype(x.dtype))
    return out


Combine = Callable[[Sequence[Layers], Sequence[Layers], np.ndarray], list[np.ndarray]]


def robust_fedbuff_step(
    current: Sequence[np.ndarray],
    models: Sequence[Sequence[np.ndarray]],
    starts: Sequence[Sequence[np.ndarray] | None],
    weights: Sequence[float],
    scales: Sequence[float],
    eta: float,
    combine: Combine,
) -> list[np.ndarray]:
    """FedBuff's step through a robust rule (`aggregation.robust`): each buffered update,
    scaled by its s_i, is moved onto the current model, z_i = x + s_i (y_i - x_tau_i); the
    rule combines the z_i (their reference: x) with the p_i, and the server steps
    x+ = x + eta (combine(z) - x). With the weighted mean this is `fedbuff_step`'s
    x + eta sum_i p_i s_i (y_i - x_tau_i); a median or a clip bounds what one update does."""
    _checked_buffer(models, starts, weights, scales)
    floating = [np.issubdtype(x.dtype, np.floating) for x in current]
    moved = [
        [
            (x.astype(np.float64) + s * (y.astype(np.float64) - (x if st is None else st[i])))
            if floating[i]
            else x
            for i, (x, y) in enumerate(zip(current, model, strict=True))
        ]
        for model, st, s in zip(models, starts, scales, strict=True)
    ]
    here = [x.astype(np.float64) if f else x for x, f in zip(current, floating, strict=True)]
    combined = combine(moved, [here] * len(moved), normalized(np.asarray(weights, np.float64)))
    return [
        (x64 + eta * (c - x64)).astype(x.dtype) if f else x.copy()
        for x, x64, c, f in zip(current, here, combined, floating, strict=True)
    ]
