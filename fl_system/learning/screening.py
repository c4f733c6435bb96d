"""Screening the round's replies before aggregation: values far above the round's median (an
update's norm, a claimed number of examples) mark a reply as hostile or broken.

The median is taken over all of the round's usable replies, so a minority of outliers cannot
move it; with fewer than `MIN_REPLIES` replies, or a median of zero, there is no scale to
trust and nothing is flagged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_REPLIES = 3


def above_median(values: Sequence[float], ratio: float | None) -> list[bool]:
    """For each value, whether it exceeds `ratio` x the median of all (None: no check)."""
    if ratio is None or len(values) < MIN_REPLIES:
        return [False] * len(values)
    median = float(np.median(np.asarray(values, dtype=np.float64)))
    if median <= 0:  # most replies did not move (freeloaders, idle clients): no scale to judge by
        return [False] * len(values)
    return [float(v) > ratio * median for v in values]
