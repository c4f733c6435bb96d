"""STEM's momentum against hand numbers."""

from __future__ import annotations

import numpy as np

from client_app.algorithms.stem import stem_direction


def test_direction_is_the_gradient_plus_the_corrected_old_direction() -> None:
    """g + (1 - a)(d - g_prev) = (1, 2) + 0.8 ((0.5, 0.5) - (2, -1)) = (-0.2, 3.2)."""
    d = stem_direction(np.array([1.0, 2.0]), np.array([2.0, -1.0]), np.array([0.5, 0.5]), 0.2)
    np.testing.assert_allclose(d, [-0.2, 3.2])


def test_a_of_one_is_the_plain_gradient() -> None:
    g = np.array([1.5, -2.0])
    assert stem_direction(g, np.array([9.0, 9.0]), np.array([-3.0, 4.0]), 1.0).tolist() == [
        1.5,
        -2.0,
    ]
