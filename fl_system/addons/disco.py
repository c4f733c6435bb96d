"""Disco weighting (FedDisco): its message keys and its discrepancy-aware aggregation weights,
as plain functions on arrays.

p_k = ReLU(n_k - a * d_k + b) / sum_m ReLU(n_m - a * d_m + b), with n_k the participants'
data shares and d_k the distance of client k's label distribution from a target T
(Ye et al., ICML 2023, Eq. 3). The authors' code divides d by its sum over the round's
participants for the KL metric only and uses L1, L2 and cosine distances raw; `auto` follows
it per metric, `sum` and `none` force one convention for every metric.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_system.learning.aggregation import cosine
from fl_system.settings.value_checks import Rule, non_negative_number

# FedDisco: a client's discrepancy d_k (up, every train reply), the target distribution T
# (down, only for target=global), and label counts (up, handshake, only for target=global).
DISCO_D = "disco-d"
DISCO_TARGET = "disco-target"
DISCO_COUNTS = "disco-counts"

METRICS = ("kl", "l1", "l2", "cosine")
NORMALIZATIONS = ("auto", "sum", "none")
TARGETS = ("uniform", "global")

# algorithm.disco.<key>: checked before a run starts (fl_system.addons.check_settings).
SETTINGS: dict[str, Rule] = {
    "a": (non_negative_number, "a number >= 0"),
    "b": (non_negative_number, "a number >= 0"),
    "metric": (lambda v: v in METRICS, f"one of {', '.join(METRICS)}"),
    "normalize_d": (lambda v: v in NORMALIZATIONS, f"one of {', '.join(NORMALIZATIONS)}"),
    "target": (lambda v: v in TARGETS, f"one of {', '.join(TARGETS)}"),
}


def label_distribution(counts: Sequence[float]) -> np.ndarray:
    """Counts per class as a distribution (sums to one)."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if c.ndim != 1 or total <= 0 or np.any(c < 0):
        raise ValueError(f"label counts must be non-negative with a positive total, got {c}")
    return c / total


def uniform_target(num_classes: int) -> np.ndarray:
    return np.full(num_classes, 1.0 / num_classes)


def discrepancy(dist: np.ndarray, target: np.ndarray, metric: str = "kl") -> float:
    """Distance d = e(D_k, T); KL is KL(D_k || T) in nats with 0 * ln 0 = 0."""
    d = np.asarray(dist, dtype=np.float64)
    t = np.asarray(target, dtype=np.float64)
    if metric == "kl":
        m = d > 0
        if np.any(t[m] <= 0):
            raise ValueError("target has zero mass on a class the client holds: KL is infinite")
        return float(np.sum(d[m] * np.log(d[m] / t[m])))
    if metric == "l2":
        return float(np.linalg.norm(d - t))
    if metric == "l1":
        return float(np.abs(d - t).sum())
    if metric == "cosine":
        return 1.0 - cosine(d, t)
    raise ValueError(f"unknown discrepancy metric '{metric}'; choose one of {', '.join(METRICS)}")


def normalization_for(metric: str, normalize_d: str = "auto") -> str:
    """'sum' or 'none' for this metric: `auto` is the authors' choice (sum for KL only)."""
    if normalize_d not in NORMALIZATIONS:
        raise ValueError(f"normalize_d must be one of {NORMALIZATIONS}, got '{normalize_d}'")
    if normalize_d != "auto":
        return normalize_d
    return "sum" if metric == "kl" else "none"


def disco_weights(
    sizes: Sequence[float],
    raw_d: Sequence[float],
    *,
    a: float = 0.5,
    b: float = 0.1,
    normalize_d: str = "sum",
) -> tuple[np.ndarray, bool]:
    """(p, fell_back): FedDisco weights over this round's participants.

    When every ReLU term is zero the formula is undefined; the weights fall back to the data
    shares n_k and `fell_back` is True so the caller can warn.
    """
    n = np.asarray(sizes, dtype=np.float64)
    n = n / n.sum()
    d = np.asarray(raw_d, dtype=np.float64)
    if normalize_d == "sum":
        total = d.sum()
        d = d / total if total > 0 else np.zeros_like(d)
    elif normalize_d != "none":
        raise ValueError(f"normalize_d must be 'sum' or 'none', got '{normalize_d}'")
    s = np.maximum(n - a * d + b, 0.0)
    if s.sum() <= 0:
        return n, True
    return s / s.sum(), False
