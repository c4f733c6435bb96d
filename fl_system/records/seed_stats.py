"""Statistics over the seeds of one configuration: mean ± std, in percentage points, and the
band a plot draws around a mean curve.

Shared by `fl-compare` and the reproduction reports in benchmarks/, so both show a seed
spread the same way.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence

import numpy as np

BAND = "band: ± 1 sample std over seeds"  # what a plot's shading is, said in its legend


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


def seed_band(
    curves: Sequence[tuple[Sequence[float], Sequence[float]]], interpolate: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean, std) over seeds of curves given as (x values, y values) each; std is the
    sample std, as `mean_std` gives the tables (0 where one seed alone has a point).

    Without `interpolate` the x values are shared points (rounds): the grid is their union and
    a seed without a point (it diverged, stopped, or was not evaluated there) drops out of the
    mean there. With it (bytes, seconds: every seed has its own) each curve is interpolated
    onto 200 points spanning all of them, and counts only within its own range.
    """
    if interpolate:
        low = min(min(xs) for xs, _ in curves)
        high = max(max(xs) for xs, _ in curves)
        grid = np.linspace(low, high, 200)
        values = np.full((len(curves), len(grid)), np.nan)
        for i, (xs, ys) in enumerate(curves):
            inside = (grid >= min(xs)) & (grid <= max(xs))
            values[i, inside] = np.interp(grid[inside], xs, ys)
    else:
        grid = np.array(sorted({x for xs, _ in curves for x in xs}), dtype=float)
        index = {x: j for j, x in enumerate(grid)}
        values = np.full((len(curves), len(grid)), np.nan)
        for i, (xs, ys) in enumerate(curves):
            for x, y in zip(xs, ys, strict=True):
                values[i, index[x]] = y
    seeds = np.sum(~np.isnan(values), axis=0)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point no seed has, or one alone
        std = np.where(seeds > 1, np.nanstd(values, axis=0, ddof=1), 0.0)
        return grid, np.nanmean(values, axis=0), std
