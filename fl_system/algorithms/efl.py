"""EFL's math as plain functions (EFL spec 2.1, 2.5, 6.4): the elastic penalty, its stability
guard and the compensation of incomplete local work. They work on numpy arrays and on torch
tensors alike: the local rule applies them to parameters at every step.

The penalty (lambda / 2) sum_i (w - w_i)^T diag(u_i) (w - w_i) over last round's clients
expands to (lambda / 2) w^T diag(U) w - lambda w^T V + const with U = sum u_i, V = sum u_i w_i,
so a client needs only U and V, never the other clients' models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from fl_system.learning.codecs import CodecError, kept_count, read_positions, top_k
from fl_system.learning.golomb import encode_positions

# EFL: the sums U = sum u_k and V = sum u_k * w_k of last round's reporters (down), and a
# client's Fisher diagonal u_k and u_k * w_k at its end model (up), keyed by parameter name.
EFL_FISHER_SUM = "efl-U"
EFL_WEIGHTED_SUM = "efl-V"
EFL_FISHER = "efl-u"
EFL_WEIGHTED = "efl-v"
# With fisher_comm=topk only the largest entries travel; their packed positions (uint8) go
# under these keys beside the values (`fisher_records` below). EFL_FISHER_DUE (config,
# down): whether the client computes and sends u, v this round (fisher_every).
EFL_SUM_POSITIONS = "efl-UV-positions"
EFL_POSITIONS = "efl-uv-positions"
EFL_FISHER_DUE = "efl-fisher-due"
EFL_PENALTY = "efl-penalty"  # metric (up): the penalty at the client's end model, less Z
EFL_UP = (EFL_FISHER, EFL_WEIGHTED, EFL_POSITIONS)
EFL_DOWN = (EFL_FISHER_SUM, EFL_WEIGHTED_SUM, EFL_SUM_POSITIONS)

T = TypeVar("T")  # np.ndarray or torch.Tensor

FISHER_COMM = ("dense", "fp16", "topk")  # how u, v (up) and U, V (down) travel (spec 2.9)
FISHER_MODES = ("empirical", "batch")  # per-sample gradients, or the batch mean's square


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
    (`learning.golomb`). v is never ternarised: V / U must stay a weighted mean of models."""
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


# ----- the Fisher terms in messages ------------------------------------------------------------
# EFL's Fisher terms in messages: u and v (or the sums U and V) per layer, as `fisher_comm`
# encodes them (`encode_fisher`), one ArrayRecord each plus one of packed
# positions when only the largest entries travel. Both directions use it: clients send u, v;
# the server sends U, V. Reading is format-driven, so the receiver needs only the shapes.
def fisher_records(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]],
    keys: tuple[str, str, str],
    *,
    comm: str,
    q: float,
) -> RecordDict:
    """{fisher key: u per layer, weighted key: v per layer[, positions key: positions]}."""
    fisher_key, weighted_key, positions_key = keys
    fisher, weighted, positions = {}, {}, {}
    for name, (u, v) in pairs.items():
        eu, ev, packed = encode_fisher(u, v, comm=comm, q=q)
        fisher[name], weighted[name] = Array(eu), Array(ev)
        if packed is not None:
            positions[name] = Array(np.frombuffer(packed, dtype=np.uint8))
    out = RecordDict({fisher_key: ArrayRecord(fisher), weighted_key: ArrayRecord(weighted)})
    if positions:
        out[positions_key] = ArrayRecord(positions)
    return out


def read_fisher(
    content: RecordDict, keys: tuple[str, str, str], shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Dense float32 {layer: (u, v)} from a message; raises CodecError naming what is wrong."""
    fisher_key, weighted_key, positions_key = keys
    fisher = content.array_records.get(fisher_key)
    weighted = content.array_records.get(weighted_key)
    positions = content.array_records.get(positions_key)
    if fisher is None or weighted is None:
        raise CodecError(f"lacks '{fisher_key}' or '{weighted_key}'")
    if set(fisher.keys()) != set(weighted.keys()):
        raise CodecError("u and v name different layers")
    out = {}
    for name in fisher:
        if name not in shapes:
            raise CodecError(f"u has layer '{name}' that the model does not have")
        packed = positions[name].numpy().tobytes() if positions and name in positions else None
        try:
            out[name] = decode_fisher(
                fisher[name].numpy(), weighted[name].numpy(), packed, tuple(shapes[name])
            )
        except CodecError as err:
            raise CodecError(f"layer '{name}': {err}") from None
    return out
