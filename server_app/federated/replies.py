"""A training reply unpacked (`ClientReply`, made by `screening.unpack_replies`), and what is
computed from a round's replies."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict


@dataclass(frozen=True)
class ClientReply:
    """One successful training reply, unpacked."""

    node_id: int
    partition_id: int
    num_examples: int
    arrays: list[np.ndarray]
    metrics: MetricRecord
    content: RecordDict


def arrays_like(template: ArrayRecord, values: list[np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with the template's keys (layer names) and the given values."""
    if not template:
        return ArrayRecord.from_numpy_ndarrays(values)
    return ArrayRecord({k: Array(v) for k, v in zip(template.keys(), values, strict=True)})


def reply_mean(replies: list[ClientReply], key: str) -> float:
    """The data-size-weighted mean of a reply metric over the replies that carry it (NaN if
    none does)."""
    pairs = [(r.num_examples, float(r.metrics[key])) for r in replies if key in r.metrics]
    return weighted_mean(pairs)


def weighted_mean(pairs: Iterable[tuple[float, float]]) -> float:
    """The mean of (weight, value) pairs, NaN without weight. Exactly rounded sums (`fsum`):
    the same replies give the same bits in any order, so a synchronous round and an
    asynchronous step that took its replies in another order agree to the bit."""
    pairs = list(pairs)
    total = math.fsum(w for w, _ in pairs)
    return math.fsum(w * v for w, v in pairs) / total if total else math.nan
