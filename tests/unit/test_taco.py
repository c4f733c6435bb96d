"""TACO's math against the spec's hand example (1.9) and its edge cases (A5, A8)."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.algorithms.taco import (
    correction_per_step,
    record_strikes,
    tailored_coefficients,
)
from fl_system.learning.aggregation import normalized_or_uniform

HAND = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])


def test_alpha_of_the_spec_hand_example() -> None:
    """Norms (1, 2, 1.732051, 1.414214), mean (0.25, 0.5, 0.25), cos (0.408248, 0.816497,
    0.942809, -0.866025): alpha = (0.341826, 0.550808, 0.677120, 0)."""
    alpha = tailored_coefficients(HAND)
    np.testing.assert_allclose(alpha, [0.341826, 0.550808, 0.677120, 0.0], atol=5e-7)
    assert alpha[3] == 0.0


def test_aggregated_step_of_the_spec_hand_example() -> None:
    weights, fallback = normalized_or_uniform(tailored_coefficients(HAND))
    assert not fallback
    np.testing.assert_allclose(weights @ HAND, [0.649112, 1.133130, 0.431354], atol=5e-7)


SMALL = np.array([[1.0, 0.2, 0.0], [0.5, 0.1, 0.3], [3.0, 1.0, 0.0]])


@pytest.mark.parametrize("scale", [1e-300, 1e-30, 1e-7, 1.0, 1e7, 1e30, 1e300])
def test_alpha_and_weights_do_not_depend_on_the_scale_of_the_uploads(scale: float) -> None:
    """alpha of these uploads is (0.782006, 0.779281, 0.336594), weights (0.412041, 0.410606,
    0.177353), at every scale: small updates (late rounds, small learning rates, fp16 models)
    keep their order, so the strikes still see the echo."""
    alpha = tailored_coefficients(scale * SMALL)
    np.testing.assert_allclose(alpha, [0.782006, 0.779281, 0.336594], atol=5e-7)
    weights, fallback = normalized_or_uniform(alpha)
    assert not fallback
    np.testing.assert_allclose(weights, [0.412041, 0.410606, 0.177353], atol=5e-7)


def test_all_negative_cosines_fall_back_to_uniform_weights() -> None:
    """Two opposite uploads: the mean is 0, every cosine is 0, so alpha = 0 and the weights
    are uniform (spec A5); one client alone has magnitude factor 0."""
    alpha = tailored_coefficients(np.array([[1.0, 2.0], [-1.0, -2.0]]))
    assert alpha.tolist() == [0.0, 0.0]
    weights, fallback = normalized_or_uniform(alpha)
    assert fallback and weights.tolist() == [0.5, 0.5]
    assert tailored_coefficients(np.array([[3.0, 4.0]])).tolist() == [0.0]


def test_a_zero_upload_gets_alpha_zero_without_nan() -> None:
    alpha = tailored_coefficients(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.1]]))
    assert np.isfinite(alpha).all() and alpha[0] == 0.0 and (alpha[1:] > 0).all()
    assert tailored_coefficients(np.zeros((3, 4))).tolist() == [0.0, 0.0, 0.0]


def test_an_echoing_client_scores_far_above_the_others() -> None:
    """Eight echoes of the last global step among twelve noisy benign uploads dominate the
    mean: every echo is above kappa = 0.6, every benign client below (spec 1.9 item 5; the
    numbers land near Table II's 0.88 against 0.2-0.45)."""
    rng = np.random.default_rng(0)
    u = rng.normal(size=50)
    benign = u + rng.normal(scale=3.0, size=(12, 50))
    alpha = tailored_coefficients(np.vstack([benign, np.tile(u, (8, 1))]))
    assert alpha[12:].min() > 0.85 and alpha[:12].max() < 0.5


@pytest.mark.parametrize("delta_scale,total", [(1.0, 0.09), (10.0, 0.9)])
def test_a_round_of_corrections_moves_the_weights_by_gamma_scale_one_minus_alpha_u(
    delta_scale: float, total: float
) -> None:
    """K = 10 steps of the per-step shift add up to gamma (1 - alpha) delta_scale u:
    0.1 * 0.9 * u literally, 0.1 * 0.9 * 10 * u reconstructed (spec 1.9 item 3)."""
    u = np.array([1.0, -2.0, 0.5])
    step = correction_per_step(u, alpha=0.1, gamma=0.1, local_steps=10, delta_scale=delta_scale)
    np.testing.assert_allclose(10 * step, total * u, rtol=1e-12)


def test_expelled_exactly_at_the_lam_th_strike_counted_cumulatively() -> None:
    """kappa is inclusive; strikes add up across non-consecutive rounds; a client is named
    once, in the round of its lam-th strike."""
    strikes: dict[int, int] = {}
    history = [
        {0: 0.6, 1: 0.2},
        {0: 0.1, 1: 0.7},
        {0: 0.8, 1: 0.59},
        {0: 0.9, 1: 0.6},
    ]
    expelled_by_round = []
    for alpha in history:
        strikes, expelled = record_strikes(alpha, strikes, kappa=0.6, lam=3)
        expelled_by_round.append(expelled)
    assert expelled_by_round == [[], [], [], [0]]
    assert strikes == {0: 3, 1: 2}
