"""Per-round local-work budgets for stragglers and low participation (EFL spec 5).

Each sampled client's budget s is drawn from (seed, round, partition) alone, so every
algorithm of a comparison, and a resumed run, sees the same stragglers: inactive (s = 0) with
probability `inactive`, else incomplete (s uniform in 1..E-1) with probability `incomplete`,
else complete (s = E). The persistent mode gives every client a fixed speed instead
(lognormal), for devices that are always slow: s = min(E, floor(speed * deadline)).
"""

from __future__ import annotations

import math

import numpy as np

from fl_system.learning.seeding import derive_seed

_BUDGET_SALT = 0x5157  # separates budget draws from the other seeds of a round


def _check_probability(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def round_budget(
    *, seed: int, server_round: int, partition: int, steps: int, incomplete: float, inactive: float
) -> int:
    """The steps this client may do this round: 0 (inactive), 1..E-1 (incomplete) or E."""
    _check_probability("stragglers.incomplete", incomplete)
    _check_probability("stragglers.inactive", inactive)
    rng = np.random.default_rng(derive_seed(seed, server_round, partition, _BUDGET_SALT))
    if rng.random() < inactive:
        return 0
    if steps > 1 and rng.random() < incomplete:
        return int(rng.integers(1, steps))
    return steps


def persistent_budget(
    *, seed: int, partition: int, steps: int, sigma: float, deadline: float
) -> int:
    """min(E, floor(speed * deadline)) with speed ~ LogNormal(0, sigma) fixed per client."""
    if sigma < 0 or deadline <= 0:
        raise ValueError(f"need sigma >= 0 and deadline > 0, got {sigma}, {deadline}")
    rng = np.random.default_rng(derive_seed(seed, partition, _BUDGET_SALT))
    speed = rng.lognormal(mean=0.0, sigma=sigma)
    return min(steps, math.floor(speed * deadline))
