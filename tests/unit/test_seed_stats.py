"""Mean ± std over seeds and the band around a mean curve, on exact vectors."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.records.seed_stats import mean_std, pct, seed_band


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_mean_and_sample_std_at_any_scale(scale: float) -> None:
    mean, std = mean_std([1 * scale, 2 * scale, 3 * scale])
    assert mean == pytest.approx(2 * scale, rel=1e-15)
    assert std == pytest.approx(1 * scale, rel=1e-15)
    assert mean_std([5 * scale]) == (5 * scale, 0.0)


def test_accuracies_in_points_and_a_diverged_seed() -> None:
    assert pct([0.5, 0.6, 0.7]) == "60.00 ± 10.00"
    assert pct([0.01, -0.01], signed=True) == "+0.00 ± 1.41"
    assert pct([0.5, None, 0.7]) == "diverged (1/3 seeds)"


def test_a_band_over_shared_rounds_drops_a_seed_where_it_has_no_point() -> None:
    """The band is the sample std the tables show (mean_std), not the population std."""
    x, mean, std = seed_band([([1, 2, 3], [0.2, 0.4, 0.6]), ([1, 2], [0.4, 0.8])])
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(mean, [0.3, 0.6, 0.6], rtol=1e-15)
    np.testing.assert_allclose(std, [0.1 * 2**0.5, 0.2 * 2**0.5, 0.0], rtol=1e-14, atol=1e-17)
    assert std[1] == pytest.approx(mean_std([0.4, 0.8])[1], rel=1e-15)


@pytest.mark.parametrize("scale", [1e-20, 1.0, 1e20])
def test_an_interpolated_band_counts_each_curve_within_its_own_range(scale: float) -> None:
    x, mean, std = seed_band(
        [([0, 2 * scale], [0.0, 1.0]), ([0, scale], [1.0, 1.0])], interpolate=True
    )
    assert len(x) == 200 and x[0] == 0 and x[-1] == pytest.approx(2 * scale, rel=1e-15)
    inside = x <= scale
    # where both count: the mean of y = x / (2 scale) and 1; beyond `scale` the first alone
    np.testing.assert_allclose(mean[inside], (x[inside] / (2 * scale) + 1) / 2, rtol=1e-12)
    np.testing.assert_allclose(mean[~inside], x[~inside] / (2 * scale), rtol=1e-12)
    np.testing.assert_allclose(std[~inside], 0.0, atol=0)
