"""Staleness weights: FedAsync's three functions (Xie et al. 2019, section 5.2), FedBuff's
1/sqrt(1 + staleness) among them, with hand-computed values."""

from __future__ import annotations

import itertools
import math

import pytest

from fl_system.learning.staleness import staleness_weight


def test_constant_counts_every_update_fully() -> None:
    assert [staleness_weight(t, "constant") for t in (0, 1, 50)] == [1.0, 1.0, 1.0]


def test_polynomial_is_one_over_staleness_plus_one_to_the_a() -> None:
    assert staleness_weight(0, "polynomial", a=0.5) == 1.0
    assert staleness_weight(3, "polynomial", a=0.5) == 0.5  # FedBuff's 1/sqrt(1 + 3)
    assert staleness_weight(1, "polynomial", a=2.0) == 0.25
    assert staleness_weight(8, "polynomial", a=1.0 / 3.0) == pytest.approx(0.48074986, abs=1e-8)


def test_hinge_is_flat_up_to_b_then_falls_as_one_over_a_times_the_excess_plus_one() -> None:
    weights = [staleness_weight(t, "hinge", a=10.0, b=4.0) for t in (0, 4, 5, 6)]
    assert weights == [1.0, 1.0, 1.0 / 11.0, 1.0 / 21.0]


def test_no_weight_exceeds_one_and_each_falls_with_staleness() -> None:
    for kind, a, b in (("polynomial", 0.5, 0.0), ("hinge", 2.0, 3.0), ("polynomial", 4.0, 0.0)):
        weights = [staleness_weight(t, kind, a=a, b=b) for t in range(200)]
        assert weights[0] == 1.0
        assert all(x >= y for x, y in itertools.pairwise(weights))
        assert all(0.0 < w <= 1.0 for w in weights)
    assert math.isfinite(staleness_weight(10**9, "polynomial", a=0.5))


def test_bad_input_names_the_problem() -> None:
    with pytest.raises(ValueError, match="staleness must be >= 0, got -1"):
        staleness_weight(-1, "constant")
    with pytest.raises(ValueError, match="one of constant, polynomial, hinge, got 'linear'"):
        staleness_weight(1, "linear")
