"""EFL's math as plain functions (EFL spec 2.1, 2.5, 6.4): the elastic penalty, its stability
guard and the compensation of incomplete local work. They work on numpy arrays and on torch
tensors alike: the local rule applies them to parameters at every step.

The penalty (lambda / 2) sum_i (w - w_i)^T diag(u_i) (w - w_i) over last round's clients
expands to (lambda / 2) w^T diag(U) w - lambda w^T V + const with U = sum u_i, V = sum u_i w_i,
so a client needs only U and V, never the other clients' models.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

T = TypeVar("T")  # np.ndarray or torch.Tensor


def penalty_gradient(w: T, fisher_sum: T, weighted_sum: T, lam: float) -> T:
    """lambda (U * w - V): the gradient of the elastic penalty at w."""
    return lam * (fisher_sum * w - weighted_sum)


def penalty_value(
    w: np.ndarray, fisher_sum: np.ndarray, weighted_sum: np.ndarray, lam: float
) -> float:
    """0.5 lambda sum(U w^2) - lambda sum(V w), the penalty up to its constant (for logging)."""
    w = np.asarray(w, dtype=np.float64)
    return float(0.5 * lam * np.sum(fisher_sum * w * w) - lam * np.sum(weighted_sum * w))


def stable_fisher_sum(fisher_sum: np.ndarray, *, lr: float, lam: float) -> tuple[np.ndarray, int]:
    """(U clamped to 1 / (lr lambda), entries clamped). Plain SGD on the penalty diverges once
    lr lambda U_j > 2 (spec 6.4); the clamp keeps every coordinate's step a contraction."""
    if lam <= 0 or lr <= 0:
        return fisher_sum, 0
    limit = 1.0 / (lr * lam)
    clipped = int(np.count_nonzero(fisher_sum > limit))
    return np.minimum(fisher_sum, limit).astype(fisher_sum.dtype, copy=False), clipped


def progress_factor(max_steps: int, steps: int, cap: float | None = None) -> float:
    """c = E / s, capped at theta: what a client that did s of E steps multiplies its progress
    by, so that every active client counts as if it had done E steps (spec 2.5)."""
    if steps < 1 or steps > max_steps:
        raise ValueError(f"steps done must be in 1..{max_steps}, got {steps}")
    factor = max_steps / steps
    return min(factor, cap) if cap is not None else factor
