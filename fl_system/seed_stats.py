"""Statistics over the seeds of one configuration: mean ± std, in percentage points.

Shared by `fl-compare` and the reproduction reports in benchmarks/, so both print a seed
spread the same way.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def pct(values: Sequence[float | None], signed: bool = False) -> str:
    """Accuracies (fractions) as 'mean ± std' in percentage points; None = a diverged run."""
    lost = sum(v is None for v in values)
    if lost:
        return f"diverged ({lost}/{len(values)} seeds)"
    mean, std = mean_std([100 * v for v in values if v is not None])
    return f"{mean:+.2f} ± {std:.2f}" if signed else f"{mean:.2f} ± {std:.2f}"
