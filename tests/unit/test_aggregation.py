from __future__ import annotations

import numpy as np
import pytest

from fl_system.aggregation import normalized, weighted_average


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
