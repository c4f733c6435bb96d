"""FedNova's normalised averaging as plain array math."""

from __future__ import annotations

import numpy as np
import pytest

from server_app.strategies.fednova_math import fednova_coefficients, fednova_update


def test_coefficients_exact() -> None:
    # p = [0.25, 0.75], tau = [2, 4]: tau_eff = 3.5, c = [0.25 * 3.5 / 2, 0.75 * 3.5 / 4]
    c, tau_eff = fednova_coefficients([1, 3], [2, 4])
    assert tau_eff == 3.5
    np.testing.assert_array_equal(c, [0.4375, 0.65625])


def test_equal_steps_give_the_weights_themselves() -> None:
    c, tau_eff = fednova_coefficients([2, 1, 1], [5, 5, 5])
    np.testing.assert_allclose(c, [0.5, 0.25, 0.25], rtol=0, atol=1e-15)
    assert tau_eff == 5.0


def test_update_exact_and_integer_layers() -> None:
    w = [np.array([0.0, 0.0], np.float32), np.array([10], np.int64)]
    a = [np.array([4.0, 0.0], np.float32), np.array([11], np.int64)]
    b = [np.array([0.0, 8.0], np.float32), np.array([12], np.int64)]
    # p = [0.5, 0.5], tau = [1, 4]: tau_eff = 2.5, c = [1.25, 0.3125]
    out, tau_eff = fednova_update(w, [a, b], [1, 1], [1, 4])
    np.testing.assert_array_equal(out[0], np.array([5.0, 2.5], np.float32))
    assert out[0].dtype == np.float32 and tau_eff == 2.5
    assert out[1].tolist() == [11]  # integer layers keep the first model's value


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="finite and positive"):
        fednova_coefficients([1, 1], [3, 0])
    with pytest.raises(ValueError, match="2 weights but 3 step counts"):
        fednova_coefficients([1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="client shape"):
        fednova_update([np.zeros(2)], [[np.zeros(3)]], [1], [1])
    with pytest.raises(ValueError, match="1 models but 2 weights"):
        fednova_update([np.zeros(2)], [[np.zeros(2)]], [1, 1], [1, 1])
