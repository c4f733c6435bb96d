"""FedGSNR's server-side math against the spec's minimal tests and hand-computed vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_system.addons import gsnr

B = 64


def _random_stats(seed: int, clients: int = 4, dim: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(clients, dim)) + rng.normal(size=dim)  # a shared direction
    variances = rng.uniform(0.1, 3.0, size=(clients, dim))
    return means, variances


def _descriptor(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.concatenate([m, np.sqrt(v / B)])


def test_global_statistics_keep_the_between_client_variance() -> None:
    m_g, v_g = gsnr.global_statistics(
        np.array([[1.0], [3.0]]), np.array([[0.5], [1.5]]), weights=[1, 3]
    )
    # p = (1/4, 3/4): m_g = 2.5; v_g = 0.125 + 1.125 + 0.25 * 1.5^2 + 0.75 * 0.5^2 = 2.0
    np.testing.assert_allclose(m_g, [2.5])
    np.testing.assert_allclose(v_g, [2.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_closed_form_n_opt_is_the_grid_search_minimiser(seed: int) -> None:
    means, variances = _random_stats(seed)
    m_g, v_g = gsnr.global_statistics(means, variances, weights=[1, 2, 3, 4])
    terms = gsnr.client_terms(means, variances, m_g, v_g, B)
    grid = np.linspace(0.0, 5.0, 500_001)  # steps of 1e-5
    a_g = _descriptor(m_g, v_g)
    for k in range(len(means)):
        a_k = _descriptor(means[k], variances[k])
        distance = ((a_g[None, :] - grid[:, None] * a_k[None, :]) ** 2).sum(axis=1)
        best = int(np.argmin(distance))
        assert terms.n_opt[k] == pytest.approx(grid[best], abs=1e-5)  # 4 decimals and better
        assert terms.delta2[k] == pytest.approx(distance[best], rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gsnr_is_the_cotangent_of_the_stacked_descriptors(seed: int) -> None:
    means, variances = _random_stats(seed)
    m_g, v_g = gsnr.global_statistics(means, variances, weights=[1, 1, 1, 1])
    terms = gsnr.client_terms(means, variances, m_g, v_g, B)
    a_g = _descriptor(m_g, v_g)
    for k in range(len(means)):
        a_k = _descriptor(means[k], variances[k])
        cos = a_k @ a_g / (np.linalg.norm(a_k) * np.linalg.norm(a_g))
        assert terms.cos[k] == pytest.approx(cos, rel=1e-12)
        assert terms.gsnr[k] == pytest.approx(max(0.0, cos / math.sqrt(1 - cos**2)), rel=1e-9)


def test_identical_clients_get_one_step_ratio_and_the_baseline_steps() -> None:
    means, variances = _random_stats(3)
    same_m, same_v = np.repeat(means[:1], 5, axis=0), np.repeat(variances[:1], 5, axis=0)
    m_g, v_g = gsnr.global_statistics(same_m, same_v, weights=[5, 1, 2, 7, 3])
    terms = gsnr.client_terms(same_m, same_v, m_g, v_g, B)
    np.testing.assert_allclose(terms.n_opt, 1.0, rtol=1e-12)
    np.testing.assert_allclose(terms.delta2, 0.0, atol=1e-12)
    # parallel descriptors: L*N - M^2 clamped, so the GSNR is large but finite
    np.testing.assert_allclose(terms.gsnr, 1 / math.sqrt(gsnr.PARALLEL_EPS), rtol=1e-6)
    assert gsnr.allocate_steps(terms.n_opt, 20).tolist() == [20] * 5


@pytest.mark.parametrize("seed", range(5))
def test_matched_steps_sum_to_the_baseline_total_and_round_each_share(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_opt = rng.uniform(0, 2, size=9) * (rng.uniform(size=9) > 0.2)
    for steps in (1, 7, 20):
        allocated = gsnr.allocate_steps(n_opt, steps)
        assert allocated.sum() == 9 * steps
        share = 9 * steps * n_opt / n_opt.sum()
        assert np.all((allocated == np.floor(share)) | (allocated == np.ceil(share)))
        assert np.all(allocated[n_opt == 0] == 0)


def test_step_allocations_by_hand() -> None:
    n_opt = [0.5, 1.0, 1.5, 0.0]
    # matched: 20 * n / 3 = (3.33, 6.67, 10, 0); the one step left goes to the largest remainder
    assert gsnr.allocate_steps(n_opt, 5).tolist() == [3, 7, 10, 0]
    # scaled: rint(5 * n) = rint(2.5, 5, 7.5, 0), halves to even
    assert gsnr.allocate_steps(n_opt, 5, allocation="scaled").tolist() == [2, 5, 8, 0]
    assert gsnr.allocate_steps(n_opt, 5, allocation="scaled", max_steps=6).tolist() == [2, 5, 6, 0]
    # water-filling: (5, 5, 20) with a cap of 15 -> (7.5, 7.5, 15); the tie goes to the first
    assert gsnr.allocate_steps([1, 1, 4], 10, max_steps=15).tolist() == [8, 7, 15]
    # every share above the cap: all capped, fewer steps than the baseline in all
    assert gsnr.allocate_steps([1, 1, 4], 10, max_steps=9).tolist() == [9, 9, 9]
    # all n_opt zero (every gradient zero): the baseline's steps
    assert gsnr.allocate_steps([0, 0, 0], 4).tolist() == [4, 4, 4]


@pytest.mark.parametrize("scale", [1e-30, 1e-12, 1e-3, 7.0, 1e4, 1e12, 1e30])
def test_n_opt_and_gsnr_do_not_change_when_gradients_are_scaled(scale: float) -> None:
    """n_opt, GSNR and cos theta are scale-free; delta2 scales with the gradients squared."""
    means, variances = _random_stats(4)
    weights = [3, 1, 4, 1]
    before = gsnr.client_terms(
        means, variances, *gsnr.global_statistics(means, variances, weights), B
    )
    m, v = scale * means, scale**2 * variances
    after = gsnr.client_terms(m, v, *gsnr.global_statistics(m, v, weights), B)
    np.testing.assert_allclose(after.n_opt, before.n_opt, rtol=1e-9)
    np.testing.assert_allclose(after.gsnr, before.gsnr, rtol=1e-9)
    np.testing.assert_allclose(after.cos, before.cos, rtol=1e-9)
    np.testing.assert_allclose(after.delta2, scale**2 * before.delta2, rtol=1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_some_client_always_gets_steps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(6, 5)) * rng.uniform(0.1, 10, size=(6, 1))
    variances = rng.uniform(0, 1, size=(6, 5))
    m_g, v_g = gsnr.global_statistics(means, variances, rng.uniform(0.1, 1, size=6))
    assert gsnr.client_terms(means, variances, m_g, v_g, B).n_opt.max() > 0


def test_a_zero_gradient_client_gets_no_steps_and_no_score() -> None:
    means = np.array([[0.0, 0.0], [1.0, -1.0]])
    variances = np.array([[0.0, 0.0], [0.5, 0.5]])
    terms = gsnr.client_terms(
        means, variances, *gsnr.global_statistics(means, variances, [1, 1]), B
    )
    assert (terms.n_opt[0], terms.gsnr[0], terms.cos[0]) == (0.0, 0.0, 0.0)
    assert terms.n_opt[1] > 0


def test_allocation_entropy() -> None:
    assert gsnr.allocation_entropy([2, 2, 2, 2]) == pytest.approx(math.log(4))
    assert gsnr.allocation_entropy([1, 0, 0]) == 0.0
    assert gsnr.allocation_entropy([1, 3]) == pytest.approx(
        -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    )
    assert gsnr.allocation_entropy([0, 0]) == 0.0


def test_contribution_scores_and_the_low_ones() -> None:
    scores = gsnr.contribution({2: [0.1, 0.2, 0.3], 0: [1, 2, 9], 1: [4, 4], 3: []})
    assert scores == {
        0: {"median": 2.0, "mean": 4.0},
        1: {"median": 4.0, "mean": 4.0},
        2: {"median": pytest.approx(0.2), "mean": pytest.approx(0.2)},
    }
    # the median of the medians is 2: below 0.5 * 2 = 1 is partition 2 only
    assert gsnr.low_contribution(scores) == [2]
    assert gsnr.low_contribution({}) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allocation": "greedy"}, "allocation must be one of matched, scaled, got 'greedy'"),
        ({"max_steps": 0}, "steps and max_steps must be >= 1"),
    ],
)
def test_bad_allocation_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gsnr.allocate_steps([1.0, 2.0], 5, **kwargs)


def test_bad_step_ratios_are_refused() -> None:
    with pytest.raises(ValueError, match="n_opt must be finite and >= 0"):
        gsnr.allocate_steps([1.0, float("nan")], 5)
