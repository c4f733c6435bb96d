"""FedAsync's server step (Xie et al. 2019, Algorithm 1): x+ = (1 - alpha_t) x + alpha_t y."""

from __future__ import annotations

import numpy as np
import pytest

from server_app.strategies.fedasync_math import fedasync_step


def test_a_step_mixes_the_update_in_by_alpha_t() -> None:
    """(1 - 0.25) (4, 8) + 0.25 (0, 4) = (3, 7)."""
    step = fedasync_step([np.array([4.0, 8.0])], [np.array([0.0, 4.0])], 0.25)
    np.testing.assert_array_equal(step[0], [3.0, 7.0])


@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e30])
def test_the_ends_keep_one_side_exactly_at_any_scale(scale: float) -> None:
    rng = np.random.default_rng(3)
    x = [(scale * rng.standard_normal((3, 2))).astype(np.float32)]
    y = [(scale * rng.standard_normal((3, 2))).astype(np.float32)]
    np.testing.assert_array_equal(fedasync_step(x, y, 0.0)[0], x[0])
    np.testing.assert_array_equal(fedasync_step(x, y, 1.0)[0], y[0])
    half = fedasync_step(x, y, 0.5)[0]
    assert half.dtype == np.float32
    np.testing.assert_allclose(half, (x[0].astype(np.float64) + y[0]) / 2, rtol=1e-6)


def test_counters_keep_the_current_value_and_bad_input_is_refused() -> None:
    step = fedasync_step([np.array([5], dtype=np.int64)], [np.array([9], dtype=np.int64)], 0.5)
    np.testing.assert_array_equal(step[0], [5])
    with pytest.raises(ValueError, match=r"alpha_t must be in \[0, 1\], got 1.5"):
        fedasync_step([np.zeros(1)], [np.zeros(1)], 1.5)
    with pytest.raises(ValueError, match="the update has 2 layers, the model 1"):
        fedasync_step([np.zeros(1)], [np.zeros(1), np.zeros(1)], 0.5)
