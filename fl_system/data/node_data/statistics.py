"""`dataset.normalize=federated`: means and standard deviations of the union of the nodes'
training records, from what each node sends: per channel (images, scaled to [0, 1]) or per
numeric feature (tables), its count, its sum, and its sum of squared deviations from its own
mean. No record leaves a node.

The server combines them with Chan et al.'s pairwise rule (`pooled_moments`), which, unlike
sums of raw squares, keeps its precision when values are large beside their spread. The
standard deviation is the population one (numpy's default, ddof=0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fl_system.data.node_data.streamed import Streamed
from fl_system.data.node_data.task import Task
from fl_system.learning.pooled_metrics import pooled_moments

CHUNK = 4096  # records at a time: a large node's float64 copy of all of them is not held


def node_moments(x: np.ndarray | Streamed, task: Task) -> dict[str, np.ndarray]:
    """A node's count, sum and centred sum of squares per channel or numeric feature, of
    its records as read (images as uint8, scaled here to [0, 1]), CHUNK records at a time
    (pooled with the same rule the server uses)."""
    parts = [_moments(np.asarray(x[i : i + CHUNK]), task) for i in range(0, len(x), CHUNK)]
    if len(parts) == 1:
        return parts[0]
    counts, sums, m2s = ([p[k] for p in parts] for k in ("count", "sum", "m2"))
    _, m2 = pooled_moments(counts, sums, m2s)
    return {"count": np.sum(counts, axis=0), "sum": np.sum(sums, axis=0), "m2": m2}


def _moments(x: np.ndarray, task: Task) -> dict[str, np.ndarray]:
    if task.is_images:
        values = x.astype(np.float64) / 255.0 if x.dtype == np.uint8 else x.astype(np.float64)
        per = np.moveaxis(values, 1, 0).reshape(values.shape[1], -1)  # (C, N*H*W)
    else:
        per = np.asarray(x, np.float64)[:, task.numeric].T  # (D, N)
    count = np.full(per.shape[0], per.shape[1], dtype=np.float64)
    total = per.sum(axis=1)
    mean = total / np.maximum(count, 1)
    return {"count": count, "sum": total, "m2": ((per - mean[:, None]) ** 2).sum(axis=1)}


def combine(moments: Sequence[dict[str, np.ndarray]]) -> tuple[list[float], list[float]]:
    """(mean, std) of the union, per channel or feature; a constant one gets std 1 (no
    scaling) rather than a division by zero."""
    count = np.sum([m["count"] for m in moments], axis=0)
    if np.any(count == 0):
        raise ValueError("no records to derive normalisation statistics from")
    mean, spread = pooled_moments(*([m[k] for m in moments] for k in ("count", "sum", "m2")))
    std = np.sqrt(spread / count)
    std = np.where(std > 0, std, 1.0)
    return [float(v) for v in mean], [float(v) for v in std]
