from __future__ import annotations

import numpy as np
import pytest

from fl_system.learning.aggregation import (
    cosine,
    cosines_to_mean,
    normalized,
    relative_norms,
    unit_rows,
    weighted_average,
)


def test_weighted_average_exact_vector() -> None:
    a = [np.array([1.0, 0.0], np.float32), np.array([2], np.int64)]
    b = [np.array([3.0, 4.0], np.float32), np.array([9], np.int64)]
    out = weighted_average([a, b], [1, 3])
    np.testing.assert_array_equal(out[0], np.array([2.5, 3.0], np.float32))
    assert out[0].dtype == np.float32
    assert out[1].tolist() == [2]  # integer layers keep the first model's value


def test_normalized_rejects_bad_weights() -> None:
    np.testing.assert_allclose(normalized([1, 1, 2]), [0.25, 0.25, 0.5])
    with pytest.raises(ValueError, match="non-negative"):
        normalized([1, -1])
    with pytest.raises(ValueError, match="sum to 0"):
        normalized([0, 0])
    with pytest.raises(ValueError, match="2 models but 1 weights"):
        weighted_average([[np.zeros(1)], [np.zeros(1)]], [1])


SCALES = [1e-300, 1e-30, 1e-12, 1.0, 1e12, 1e30, 1e300]
UPLOADS = np.array([[3.0, 4.0, 0.0], [0.0, 1.0, 0.0], [-6.0, -8.0, 0.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("scale", SCALES)
def test_cosines_to_the_mean_are_the_same_at_every_scale(scale: float) -> None:
    """Mean (-0.75, -0.75, 0): cosines (-0.989949, -0.707107, 0.989949) and 0 for the zero
    row, whether the uploads are of size 1e-300 or 1e+300."""
    cos = cosines_to_mean(scale * UPLOADS)
    np.testing.assert_allclose(cos, [-0.989949, -0.707107, 0.989949, 0.0], atol=5e-7)
    assert cos[3] == 0.0


@pytest.mark.parametrize("scale", SCALES)
def test_unit_rows_and_relative_norms_at_every_scale(scale: float) -> None:
    units = unit_rows(scale * UPLOADS)
    np.testing.assert_allclose(units[0], [0.6, 0.8, 0.0], rtol=1e-15)
    assert units[3].tolist() == [0.0, 0.0, 0.0]
    norms = relative_norms(scale * UPLOADS)
    np.testing.assert_allclose(norms / norms.sum(), [5 / 16, 1 / 16, 10 / 16, 0.0], rtol=1e-15)
    assert cosine(scale * UPLOADS[0], UPLOADS[1]) == pytest.approx(0.8, rel=1e-15)


def test_a_zero_mean_gives_zero_cosines() -> None:
    assert cosines_to_mean(np.array([[1.0, 2.0], [-1.0, -2.0]])).tolist() == [0.0, 0.0]
    assert cosine(np.zeros(2), np.ones(2)) == 0.0
