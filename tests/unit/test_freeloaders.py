"""Freeloaders' replies: the global model back, the last global update echoed, or noise at
its scale; the first time (nothing received before) every kind sends back a zero update."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.learning.freeloaders import freeload

RECEIVED = {"w": np.array([1.0, 2.0, 3.0], np.float32), "n": np.array([5], np.int64)}
PREVIOUS = {"w": np.array([2.0, 2.0, 1.0], np.float32), "n": np.array([4], np.int64)}


def test_global_sends_back_the_received_model() -> None:
    out = freeload("global", RECEIVED, PREVIOUS, np.random.default_rng(0))
    assert out["w"].tolist() == [1.0, 2.0, 3.0] and out["n"].tolist() == [5]


def test_echo_uploads_the_last_global_update_as_its_own() -> None:
    """u = w_prev - w = (1, 0, -2); the reply w - u = (0, 2, 5), so w - reply = u."""
    out = freeload("echo", RECEIVED, PREVIOUS, np.random.default_rng(0))
    assert out["w"].tolist() == [0.0, 2.0, 5.0] and out["w"].dtype == np.float32
    assert out["n"].tolist() == [5]


def test_noise_has_the_last_updates_scale() -> None:
    big = {"w": np.zeros(20000, np.float32)}
    before = {"w": np.full(20000, 3.0, np.float32)}  # u = 3 everywhere: rms 3
    out = freeload("noise", big, before, np.random.default_rng(0))
    assert np.std(out["w"]) == pytest.approx(3.0, rel=0.02) and abs(np.mean(out["w"])) < 0.1


@pytest.mark.parametrize("kind", ["global", "echo", "noise"])
def test_the_first_reply_is_the_received_model(kind: str) -> None:
    out = freeload(kind, RECEIVED, None, np.random.default_rng(0))
    assert out["w"].tolist() == [1.0, 2.0, 3.0]


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match=r"clients\.freeloaders\.kind must be one of global, echo"):
        freeload("lazy", RECEIVED, None, np.random.default_rng(0))
