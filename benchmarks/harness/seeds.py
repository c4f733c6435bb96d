"""Statistics over seeds: per-seed differences and whether a gain stands out (mean ± std is
the core's, shared with fl-compare)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from fl_system.records.seed_stats import mean_std, pct

__all__ = [
    "difference",
    "geometric_mean",
    "mean_std",
    "pct",
    "ratio",
    "reached_cell",
    "significance",
]


def difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def significance(gains: Sequence[float | None]) -> str:
    """'+0.23 points (higher in 3/3 seeds, more than 2 standard errors from zero)'."""
    if any(v is None for v in gains):
        return f"n/a ({pct(gains)})"
    mean, std = mean_std([100 * v for v in gains if v is not None])
    se = std / len(gains) ** 0.5 if len(gains) > 1 else float("inf")
    side = "more" if abs(mean) > 2 * se else "less"
    up = sum(v is not None and v > 0 for v in gains)
    return f"{mean:+.2f} points (higher in {up}/{len(gains)} seeds; {side} than 2 SE from zero)"


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def geometric_mean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def reached_cell(values: Sequence[float | None], fmt: str) -> str:
    """Mean ± std (in `fmt`) over the seeds that reached something (None: did not), and how
    many did; "never" if none did."""
    got = [v for v in values if v is not None]
    if not got:
        return "never"
    mean, std = mean_std(got)
    tail = "" if len(got) == len(values) else f" ({len(got)}/{len(values)} seeds)"
    return f"{mean:{fmt}} ± {std:{fmt}}{tail}"
