"""How much an asynchronous update counts given its staleness (FedAsync's s(t - tau)).

A client trains from the server's model at version tau; its update reaches a server at
version t, staleness t - tau >= 0. Xie, Koyejo and Gupta (2019, "Asynchronous Federated
Optimization", section 5.2) weigh it by one of:

- constant: s = 1;
- polynomial(a): s = (t - tau + 1)^(-a);
- hinge(a, b): s = 1 while t - tau <= b, else 1 / (a (t - tau - b) + 1).

FedBuff (Nguyen et al. 2022, Algorithm 1) weighs by 1 / sqrt(1 + staleness): polynomial(0.5).
Each s is 1 for a fresh update and never above it.
"""

from __future__ import annotations

import math

KINDS = ("constant", "polynomial", "hinge")


def staleness_weight(staleness: int, kind: str, a: float = 0.5, b: float = 0.0) -> float:
    """s(staleness) for `kind` with its parameters `a` (and `b` for the hinge)."""
    if staleness < 0:
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return math.pow(staleness + 1, -a)
    if kind == "hinge":
        return 1.0 if staleness <= b else 1.0 / (a * (staleness - b) + 1.0)
    raise ValueError(f"staleness must be one of {', '.join(KINDS)}, got {kind!r}")
