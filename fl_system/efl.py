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

from fl_system.codecs import CodecError, kept_count, read_positions, top_k
from fl_system.golomb import encode_positions

T = TypeVar("T")  # np.ndarray or torch.Tensor

FISHER_COMM = ("dense", "fp16", "topk")  # how u, v (up) and U, V (down) travel (spec 2.9)


def penalty_gradient(w: T, fisher_sum: T, weighted_sum: T, lam: float) -> T:
    """lambda (U * w - V): the gradient of the elastic penalty at w."""
    return lam * (fisher_sum * w - weighted_sum)


def penalty_value(
    w: np.ndarray, fisher_sum: np.ndarray, weighted_sum: np.ndarray, lam: float
) -> float:
    """0.5 lambda sum(U w^2) - lambda sum(V w), the penalty up to its constant (for logging)."""
    w = np.asarray(w, dtype=np.float64)
    return float(0.5 * lam * np.sum(fisher_sum * w * w) - lam * np.sum(weighted_sum * w))


def stable_sums(
    fisher_sum: np.ndarray, weighted_sum: np.ndarray, *, lr: float, lam: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """(U, V, entries clamped) with U clamped to 1 / (lr lambda) and V scaled alike.

    Plain SGD on the penalty diverges once lr lambda U_j > 2 (spec 6.4); the clamp keeps every
    coordinate's step a contraction. Clamping U alone would move the penalty's fixed point
    V_j / U_j (the Fisher-weighted mean of the clients' models) out by U_j / limit, which
    diverges as surely; scaling V_j by the same factor keeps the point and weakens the pull.
    """
    if lam <= 0 or lr <= 0:
        return fisher_sum, weighted_sum, 0
    limit = 1.0 / (lr * lam)
    over = fisher_sum > limit
    clipped = int(np.count_nonzero(over))
    if not clipped:
        return fisher_sum, weighted_sum, 0
    scale = np.where(over, limit / np.where(over, fisher_sum, 1.0), 1.0)
    return (
        (fisher_sum * scale).astype(fisher_sum.dtype, copy=False),
        (weighted_sum * scale).astype(weighted_sum.dtype, copy=False),
        clipped,
    )


def progress_factor(max_steps: int, steps: int, cap: float | None = None) -> float:
    """c = E / s, capped at theta: what a client that did s of E steps multiplies its progress
    by, so that every active client counts as if it had done E steps (spec 2.5)."""
    if steps < 1 or steps > max_steps:
        raise ValueError(f"steps done must be in 1..{max_steps}, got {steps}")
    factor = max_steps / steps
    return min(factor, cap) if cap is not None else factor


def encode_fisher(
    u: np.ndarray, v: np.ndarray, *, comm: str, q: float
) -> tuple[np.ndarray, np.ndarray, bytes | None]:
    """(u, v, packed positions) of one tensor as they travel (spec 2.9 `fisher_comm`):
    dense float32 (the paper; no positions), float16, or `topk`: the k = max(1, floor(q n))
    largest u with the v at the same positions, float32, positions Golomb-Rice coded
    (`fl_system.golomb`). v is never ternarised: V / U must stay a weighted mean of models."""
    u = np.asarray(u, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    if comm == "dense":
        return u, v, None
    if comm == "fp16":
        return u.astype(np.float16), v.astype(np.float16), None
    if comm == "topk":
        kept = top_k(u, kept_count(u.size, q))
        positions = encode_positions(kept, u.size)
        return u.reshape(-1)[kept], v.reshape(-1)[kept], positions
    raise ValueError(f"fisher_comm must be one of {', '.join(FISHER_COMM)}, got {comm!r}")


def decode_fisher(
    u: np.ndarray, v: np.ndarray, positions: bytes | None, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Dense float32 (u, v) of `shape` from what `encode_fisher` sent; entries not sent are 0.
    Raises CodecError when the parts do not fit the shape."""
    n = int(np.prod(shape, dtype=np.int64))
    u, v = np.asarray(u).reshape(-1), np.asarray(v).reshape(-1)
    if u.size != v.size:
        raise CodecError(f"u has {u.size} entries but v has {v.size}")
    if positions is None:
        if u.size != n:
            raise CodecError(f"{u.size} entries sent for a tensor of {n}")
        return u.astype(np.float32).reshape(shape), v.astype(np.float32).reshape(shape)
    if not 1 <= u.size <= n:
        raise CodecError(f"{u.size} values do not fit a tensor of {n}")
    kept = read_positions(positions, n, u.size)
    dense_u, dense_v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    dense_u[kept], dense_v[kept] = u, v
    return dense_u.reshape(shape), dense_v.reshape(shape)
