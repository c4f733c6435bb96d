"""clients.malicious: each kind of hostile reply, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.learning.malicious import HUGE_EXAMPLES, PADDING, tamper

F = np.float32


def _model() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    trained = {"w": np.array([[1, 2], [3, 4]], F), "b": np.array([0.5], F), "n": np.array(7)}
    received = {"w": np.zeros((2, 2), F), "b": np.array([0.25], F), "n": np.array(7)}
    return trained, received


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_nan_and_inf_fill_the_first_float_layer(kind: str) -> None:
    trained, received = _model()
    out, n = tamper(kind, trained, received, 10, scale=1.0)
    assert n == 10
    assert np.isnan(out["w"]).all() if kind == "nan" else np.isposinf(out["w"]).all()
    np.testing.assert_array_equal(out["b"], trained["b"])


def test_shape_dtype_missing_and_huge() -> None:
    trained, received = _model()
    assert tamper("shape", trained, received, 10, scale=1.0)[0]["w"].shape == (1, 2)
    as_double = tamper("dtype", trained, received, 10, scale=1.0)[0]
    assert as_double["w"].dtype == np.float64 and as_double["n"].dtype == trained["n"].dtype
    assert list(tamper("missing", trained, received, 10, scale=1.0)[0]) == ["w", "b"]
    out, n = tamper("huge", trained, received, 10, scale=1.0)
    assert n == HUGE_EXAMPLES
    np.testing.assert_array_equal(out["w"], trained["w"])


def test_scaled_multiplies_the_update() -> None:
    trained, received = _model()
    out, _ = tamper("scaled", trained, received, 10, scale=100.0)
    np.testing.assert_array_equal(out["w"], np.array([[100, 200], [300, 400]], F))
    np.testing.assert_allclose(out["b"], [0.25 + 100 * 0.25])
    assert out["n"].tolist() == 7  # not a float layer: as trained


def test_oversized_pads_the_model_beyond_the_reply_limit() -> None:
    trained, received = _model()
    out, n = tamper("oversized", trained, received, 10, scale=1.0)
    assert n == 10 and list(out) == ["w", "b", "n", PADDING]
    np.testing.assert_array_equal(out["w"], trained["w"])
    model_values = 4 + 1 + 1
    assert out[PADDING].dtype == F and out[PADDING].size == 5 * model_values + 2**19
    assert out[PADDING].nbytes > 4 * 4 * model_values + 2**20  # max_reply_ratio 4, + 1 MiB


def test_an_unknown_kind_is_named() -> None:
    trained, received = _model()
    with pytest.raises(ValueError, match=r"clients\.malicious\.kind must be one of nan, inf"):
        tamper("evil", trained, received, 10, scale=1.0)
