"""The virtual clock's arithmetic: a client's time in a round from bytes, steps and its profile.

Pure functions on plain numbers, so the clock is deterministic and independent of this
machine's load. A client's time in a round is, for every exchange it takes part in, its
download (bytes / downlink + latency) and its upload (bytes / uplink + latency), plus its
compute (the local steps it ran x batch x its seconds per sample). The server's aggregation
is not modelled (it is the same for every algorithm of a comparison and small beside a
round on devices).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """One client's device and network: seconds per training sample, bytes per second each
    way, one-way latency in seconds (paid once per message each way)."""

    seconds_per_sample: float
    up_bytes_per_second: float
    down_bytes_per_second: float
    latency: float = 0.0


def megabits(mbps: float) -> float:
    """Mbit/s (10^6 bits) as bytes per second."""
    return mbps * 1e6 / 8


def transfer_seconds(num_bytes: float, bytes_per_second: float, latency: float) -> float:
    """One message of `num_bytes` over a link: its latency plus its bytes at the link's rate."""
    return latency + num_bytes / bytes_per_second


def compute_seconds(steps: float, batch_size: int, profile: Profile) -> float:
    """Local training: steps x batch x seconds per sample."""
    return steps * batch_size * profile.seconds_per_sample


def client_seconds(
    profile: Profile,
    *,
    down: Sequence[float],
    up: Sequence[float],
    steps: float,
    batch_size: int,
) -> float:
    """A client's time in a round: each message it received (`down`, bytes) and sent (`up`),
    and its local steps."""
    return (
        sum(transfer_seconds(b, profile.down_bytes_per_second, profile.latency) for b in down)
        + compute_seconds(steps, batch_size, profile)
        + sum(transfer_seconds(b, profile.up_bytes_per_second, profile.latency) for b in up)
    )


def steps_within(
    deadline: float,
    profile: Profile,
    *,
    down: Sequence[float],
    up: Sequence[float],
    batch_size: int,
    steps: int,
) -> int:
    """The local steps (at most `steps`) a client can run and still send its reply by
    `deadline`, given what it must download and upload; 0 when not even one fits."""
    spare = deadline - client_seconds(profile, down=down, up=up, steps=0, batch_size=batch_size)
    per_step = compute_seconds(1, batch_size, profile)
    if spare < per_step:
        return 0
    if per_step == 0:
        return steps
    return min(steps, math.floor(spare / per_step * (1 + 1e-12)))


def first_finishers(finish: Mapping[int, float], k: int) -> list[int]:
    """The `k` clients that finish first (ties by id), in finishing order."""
    return sorted(finish, key=lambda c: (finish[c], c))[:k]


def round_seconds(
    finish: Mapping[int, float],
    *,
    deadline: float | None = None,
    missed_deadline: bool = False,
    first_k: int | None = None,
) -> float:
    """A round's virtual time from its counted clients' finishing times: the slowest one; the
    k-th finisher under over-commitment; the deadline itself when somebody missed it (the
    server waited that long for them)."""
    times = sorted(finish.values())
    if first_k is not None and len(times) >= first_k:
        return times[first_k - 1]  # the k-th finisher closes the round
    if deadline is not None and missed_deadline:
        return deadline  # the server waited that long for those who missed it
    return times[-1] if times else 0.0
