"""The GSNR step schedule (FedGSNR): its message keys and its math, as plain functions on
arrays (float64), computed on the server from what the clients send.

Each sampled client k sends its mean gradient m_k and diagonal gradient variance v_k at the
global model. The server pools them (law of total variance), gives every client its optimal
step ratio n_opt_k (the minimiser of the 2-Wasserstein distance between n local steps and one
centralised step) and its GSNR r_k = cot of the angle between the client's and the pooled
descriptor a = (m, sqrt(v / B)), then turns the ratios into integer local steps.
Spec: shared/specs/fedgsnr.md sections 1.3-1.5, 1.8 and 6.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fl_system.settings.value_checks import Rule, integer_at_least, optional

# FedGSNR: the question, and the reply's ArrayRecord of the mean gradient m_k and diagonal
# variance v_k at the received model, with the number of samples s in the metrics.
GSNR_STATS = "gsnr-stats"
GSNR_MEAN = "mean"
GSNR_VARIANCE = "variance"
GSNR_SAMPLES = "gsnr-samples"

ALLOCATIONS = ("matched", "scaled")

# algorithm.gsnr.<key>: checked before a run starts (fl_system.addons.check_settings).
SETTINGS: dict[str, Rule] = {
    "samples": (integer_at_least(1), "an integer >= 1"),
    "allocation": (lambda v: v in ALLOCATIONS, f"one of {', '.join(ALLOCATIONS)}"),
    "max_steps": (optional(integer_at_least(1)), "null or an integer >= 1"),
}
PARALLEL_EPS = 1e-12  # L*N - M^2 is clamped to this share of L*N: parallel descriptors


@dataclass(frozen=True)
class ClientTerms:
    """Per-client results of one round, in the order of the clients given."""

    n_opt: np.ndarray  # optimal step ratio, >= 0
    gsnr: np.ndarray  # r_k = max(0, cot theta_k), large but finite for parallel descriptors
    cos: np.ndarray  # cos theta_k, 0 where a descriptor is zero
    delta2: np.ndarray  # the minimal squared distance, in units of the learning rate squared


def global_statistics(
    means: np.ndarray, variances: np.ndarray, weights: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """(m_g, v_g): the pooled mean and diagonal variance; weights are renormalised to sum to 1.

    v_g keeps the between-client term sum_k p_k (m_k - m_g)^2: under non-IID data it is what
    makes the pooled variance differ from the clients' own.
    """
    m = np.asarray(means, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    p = np.asarray(weights, dtype=np.float64)
    if m.ndim != 2 or m.shape != v.shape or p.shape != (m.shape[0],):
        raise ValueError(f"means {m.shape}, variances {v.shape}, weights {p.shape} do not match")
    if np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {p}")
    p = p / p.sum()
    m_g = p @ m
    v_g = p @ v + p @ (m - m_g) ** 2
    return m_g, v_g


def client_terms(
    means: np.ndarray,
    variances: np.ndarray,
    m_g: np.ndarray,
    v_g: np.ndarray,
    batch_size: int,
) -> ClientTerms:
    """n_opt, GSNR, cos theta and the minimal distance of every client (spec 1.4, 1.8, 6.7).

    Scale-free: the statistics are first divided by their largest magnitude s (the variances
    by s^2), so the squared sums below neither underflow nor overflow at any finite scale;
    only delta2, a squared distance, is scaled back.
    """
    m, v, m_g, v_g, scale = _rescaled(means, variances, m_g, v_g)
    big_l = m_g @ m_g + v_g.sum() / batch_size
    big_n = np.einsum("kd,kd->k", m, m) + v.sum(axis=1) / batch_size
    big_m = m @ m_g + np.sqrt(v) @ np.sqrt(v_g) / batch_size
    ln = big_l * big_n
    n_opt = np.maximum(0.0, _ratio(big_m, big_n))
    delta2 = big_l - _ratio(big_m**2, big_n)
    cos = _ratio(big_m, np.sqrt(ln))
    orthogonal = np.maximum(ln - big_m**2, PARALLEL_EPS * ln)
    gsnr = np.where(big_m > 0, _ratio(big_m, np.sqrt(orthogonal)), 0.0)
    return ClientTerms(n_opt=n_opt, gsnr=gsnr, cos=cos, delta2=delta2 * scale**2)


def _rescaled(
    means: np.ndarray, variances: np.ndarray, m_g: np.ndarray, v_g: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(m / s, v / s^2, m_g / s, v_g / s^2, s), s the largest of |m|, |m_g|, sqrt(v), sqrt(v_g)
    (1 when all are zero)."""
    m, v = np.asarray(means, dtype=np.float64), np.asarray(variances, dtype=np.float64)
    m_g, v_g = np.asarray(m_g, dtype=np.float64), np.asarray(v_g, dtype=np.float64)
    parts = (np.abs(m), np.abs(m_g), np.sqrt(v), np.sqrt(v_g))
    s = max((float(p.max()) for p in parts if p.size), default=0.0)
    s = s if s > 0 else 1.0
    return m / s, v / s**2, m_g / s, v_g / s**2, s


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0 (a zero descriptor)."""
    out = np.zeros_like(numerator)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def allocate_steps(
    n_opt: Sequence[float],
    steps: int,
    *,
    allocation: str = "matched",
    max_steps: int | None = None,
) -> np.ndarray:
    """Integer local steps per client.

    matched: E_k proportional to n_opt_k with sum_k E_k = K * steps (largest-remainder
    rounding; the paper's tables). scaled: E_k = round(steps * n_opt_k) (its Algorithm 1).
    `max_steps` caps E_k; in matched mode the excess goes to the uncapped clients in
    proportion to n_opt (water-filling). All n_opt zero: `steps` each (the caller warns).
    """
    n = np.asarray(n_opt, dtype=np.float64)
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {', '.join(ALLOCATIONS)}, got {allocation!r}")
    if steps < 1 or (max_steps is not None and max_steps < 1):
        raise ValueError(f"steps and max_steps must be >= 1, got {steps} and {max_steps}")
    if np.any(~np.isfinite(n)) or np.any(n < 0):
        raise ValueError(f"n_opt must be finite and >= 0, got {n}")
    if n.sum() <= 0:
        uniform = np.full(len(n), steps, dtype=np.int64)
        return uniform if max_steps is None else np.minimum(uniform, max_steps)
    if allocation == "scaled":
        scaled = np.rint(steps * n).astype(np.int64)
        return scaled if max_steps is None else np.minimum(scaled, max_steps)
    raw = _water_fill(n, float(len(n) * steps), max_steps)
    return _largest_remainder(raw)


def _water_fill(n: np.ndarray, total: float, cap: int | None) -> np.ndarray:
    """Shares of `total` proportional to n, none above `cap` (the excess goes to the rest)."""
    raw = np.zeros_like(n)
    free = n > 0
    while free.any():
        raw[free] = total * n[free] / n[free].sum()
        over = free & (raw > cap) if cap is not None else np.zeros_like(free)
        if not over.any():
            break
        raw[over] = cap
        total -= cap * int(over.sum())
        free &= ~over
    return raw


def _largest_remainder(raw: np.ndarray) -> np.ndarray:
    """Integers that sum to round(sum(raw)), each floor or ceil of its share; ties to the first."""
    steps = np.floor(raw).astype(np.int64)
    missing = round(float(raw.sum())) - int(steps.sum())
    order = np.argsort(-(raw - steps), kind="stable")
    steps[order[:missing]] += 1
    return steps


def allocation_entropy(n_opt: Sequence[float]) -> float:
    """H = -sum q_k ln q_k with q = n_opt / sum(n_opt); log(K) for a uniform allocation."""
    n = np.asarray(n_opt, dtype=np.float64)
    if n.sum() <= 0:
        return 0.0
    q = n[n > 0] / n.sum()
    return float(-(q * np.log(q)).sum())


def contribution(gsnr_by_partition: Mapping[int, Sequence[float]]) -> dict[int, dict[str, float]]:
    """Median and mean GSNR over the rounds each partition was sampled (spec 1.8)."""
    return {
        pid: {"median": float(np.median(values)), "mean": float(np.mean(values))}
        for pid, values in sorted(gsnr_by_partition.items())
        if len(values) > 0
    }


def low_contribution(scores: Mapping[int, Mapping[str, float]], factor: float = 0.5) -> list[int]:
    """Partitions whose median GSNR is below `factor` times the median of all medians."""
    if not scores:
        return []
    medians = {pid: s["median"] for pid, s in scores.items()}
    threshold = factor * float(np.median(list(medians.values())))
    return sorted(pid for pid, median in medians.items() if median < threshold)
