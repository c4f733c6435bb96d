"""FedBuff's server step (Nguyen et al. 2022, Algorithm 1): hand-computed vectors, FedAvg to
the bit when the buffer holds every client fresh, any scale."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.learning.aggregation import weighted_average
from fl_system.learning.robust import CoordinateMedian, WeightedMean
from server_app.strategies.fedbuff_math import fedbuff_step, robust_fedbuff_step


def test_a_step_adds_each_updates_change_from_its_own_start() -> None:
    """x = (1, 2); y1 = (3, 2) fresh, weight 1, s = 1; y2 = (0, 0) trained from (1, 0),
    weight 3, s = 0.5. p = (1/4, 3/4), c = (1/4, 3/8):
    x+ = x + 1/4 (2, 0) + 3/8 (-1, 0) = (1.125, 2)."""
    x = [np.array([1.0, 2.0])]
    step = fedbuff_step(
        x,
        models=[[np.array([3.0, 2.0])], [np.array([0.0, 0.0])]],
        starts=[None, [np.array([1.0, 0.0])]],
        weights=[1.0, 3.0],
        scales=[1.0, 0.5],
        eta=1.0,
    )
    np.testing.assert_array_equal(step[0], [1.125, 2.0])


def test_the_server_rate_scales_the_step() -> None:
    """eta = 0.5 on one fresh update y = (4,): x+ = 2 + 0.5 (4 - 2) = 3."""
    step = fedbuff_step([np.array([2.0])], [[np.array([4.0])]], [None], [1.0], [1.0], eta=0.5)
    np.testing.assert_array_equal(step[0], [3.0])


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_all_fresh_with_unit_rates_is_fedavg_to_the_bit(scale: float) -> None:
    rng = np.random.default_rng(7)
    shapes = [(3, 4), (4,), (2, 2, 3)]
    current = [(scale * rng.standard_normal(s)).astype(np.float32) for s in shapes]
    models = [
        [(scale * rng.standard_normal(s)).astype(np.float32) for s in shapes] for _ in range(5)
    ]
    weights = [40.0, 13.0, 7.0, 29.0, 40.0]
    step = fedbuff_step(current, models, [None] * 5, weights, [1.0] * 5, eta=1.0)
    for got, want in zip(step, weighted_average(models, weights), strict=True):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_counters_keep_the_current_value() -> None:
    step = fedbuff_step(
        [np.array([5], dtype=np.int64)], [[np.array([9], dtype=np.int64)]], [None], [1], [1], 1.0
    )
    np.testing.assert_array_equal(step[0], [5])


def test_mismatched_buffers_and_bad_scales_are_refused() -> None:
    with pytest.raises(ValueError, match="2 models, 1 starts, 2 weights and 2 staleness scales"):
        fedbuff_step([np.zeros(1)], [[np.zeros(1)]] * 2, [None], [1, 1], [1, 1], 1.0)
    with pytest.raises(ValueError, match="staleness scales must be finite and >= 0"):
        fedbuff_step([np.zeros(1)], [[np.zeros(1)]], [None], [1], [-0.5], 1.0)


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_a_robust_step_medians_the_moved_updates(scale: float) -> None:
    """x = (0, 0); three updates, s = (1, 1, 0.5): y_1 = (1, 2) fresh, y_2 = (3, -1) from
    x_tau = (1, 1), y_3 = (100, 100) fresh (hostile). Moved onto x: z = (1, 2), (2, -2),
    (50, 50); their coordinate median (2, 2); eta = 0.5 steps halfway: (1, 1). With the
    weighted mean (p = 1/3 each) it is fedbuff_step's: (53, 50) / 3 * 0.5."""
    x = [np.zeros(2) * scale]
    models = [[np.array([1.0, 2.0]) * scale], [np.array([3.0, -1.0]) * scale]]
    models.append([np.array([100.0, 100.0]) * scale])
    starts = [None, [np.array([1.0, 1.0]) * scale], None]
    buffer = (x, models, starts, [1.0, 1.0, 1.0], [1.0, 1.0, 0.5], 0.5)
    median = robust_fedbuff_step(*buffer, CoordinateMedian().combine)
    np.testing.assert_allclose(median[0], np.array([1.0, 1.0]) * scale, rtol=1e-12)
    mean = robust_fedbuff_step(*buffer, WeightedMean().combine)
    np.testing.assert_allclose(mean[0], fedbuff_step(*buffer)[0], rtol=1e-12)
    np.testing.assert_allclose(mean[0], np.array([53.0, 50.0]) / 6 * scale, rtol=1e-12)


def test_a_robust_step_keeps_counters_and_dtypes() -> None:
    x = [np.zeros(2, np.float32), np.array([7], np.int64)]
    y = [np.ones(2, np.float32), np.array([9], np.int64)]
    out = robust_fedbuff_step(x, [y, y], [None, None], [1.0, 3.0], [1.0, 1.0], 1.0,
                              CoordinateMedian().combine)  # fmt: skip
    assert out[0].dtype == np.float32 and out[1].tolist() == [7]
    np.testing.assert_array_equal(out[0], np.ones(2, np.float32))
