"""FedDisco weights: the spec's test vectors, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.addons.disco import (
    disco_weights,
    discrepancy,
    label_distribution,
    normalization_for,
    uniform_target,
)

COUNTS = [[50, 50, 0], [10, 10, 10], [90, 0, 0]]


def _d(counts, metric):
    return [discrepancy(label_distribution(c), uniform_target(len(c)), metric) for c in counts]


def test_normalised_kl_vector() -> None:
    p, fell_back = disco_weights([sum(c) for c in COUNTS], _d(COUNTS, "kl"), a=0.5, b=0.1)
    np.testing.assert_allclose(p, [0.524696, 0.295455, 0.179849], atol=5e-7)
    assert not fell_back


def test_unnormalised_l2_vector() -> None:
    d = _d(COUNTS, "l2")
    np.testing.assert_allclose(d, [0.408248, 0.0, 0.816497], atol=5e-7)
    p, _ = disco_weights([sum(c) for c in COUNTS], d, a=0.5, b=0.1, normalize_d="none")
    np.testing.assert_allclose(p, [0.509609, 0.343738, 0.146653], atol=5e-7)


@pytest.mark.parametrize(
    ("normalize_d", "expected"),
    [
        ("auto", [0.483444, 0.516556, 0.0]),  # the authors' code: L1 distances raw
        ("sum", [0.484848, 0.295455, 0.219697]),  # d over the participants sums to one
    ],
)
def test_l1_vector_under_each_normalisation(normalize_d: str, expected: list[float]) -> None:
    d = _d(COUNTS, "l1")
    np.testing.assert_allclose(d, [2 / 3, 0.0, 4 / 3], atol=1e-12)
    mode = normalization_for("l1", normalize_d)
    p, _ = disco_weights([sum(c) for c in COUNTS], d, a=0.5, b=0.1, normalize_d=mode)
    np.testing.assert_allclose(p, expected, atol=5e-7)


@pytest.mark.parametrize(
    ("metric", "mode"), [("kl", "sum"), ("l1", "none"), ("l2", "none"), ("cosine", "none")]
)
def test_auto_follows_the_authors_per_metric(metric: str, mode: str) -> None:
    assert normalization_for(metric) == mode
    assert normalization_for(metric, "sum") == "sum"
    assert normalization_for(metric, "none") == "none"


def _niid2_counts() -> list[list[int]]:
    biased = [[4165 if c in (2 * i, 2 * i + 1) else 0 for c in range(10)] for i in range(5)]
    return [*biased, [833] * 10]


def test_cifar10_niid2_normalised_kl() -> None:
    counts = _niid2_counts()
    p, _ = disco_weights([sum(c) for c in counts], _d(counts, "kl"), a=0.5, b=0.1)
    np.testing.assert_allclose(p, [0.1515] * 5 + [0.2424], atol=5e-5)


@pytest.mark.parametrize("metric", ["kl", "l1", "l2", "cosine"])
def test_cifar10_niid2_unnormalised_keeps_only_the_iid_client(metric: str) -> None:
    counts = _niid2_counts()
    p, _ = disco_weights(
        [sum(c) for c in counts], _d(counts, metric), a=0.5, b=0.1, normalize_d="none"
    )
    np.testing.assert_allclose(p, [0.0] * 5 + [1.0], atol=1e-12)


def test_a_zero_b_zero_is_fedavg() -> None:
    sizes = [100, 37, 863]
    p, _ = disco_weights(sizes, _d(COUNTS, "kl"), a=0.0, b=0.0)
    np.testing.assert_allclose(p, np.array(sizes) / sum(sizes))


def test_every_weight_clipped_falls_back_to_data_shares() -> None:
    p, fell_back = disco_weights([1, 3], [0.9, 0.1], a=10.0, b=0.0)
    assert fell_back
    np.testing.assert_allclose(p, [0.25, 0.75])


def test_equal_discrepancies_and_sizes_give_uniform_weights() -> None:
    p, _ = disco_weights([5, 5, 5], [0.3, 0.3, 0.3])
    np.testing.assert_allclose(p, [1 / 3] * 3)


def test_kl_is_local_to_target_and_errors_are_clear() -> None:
    assert discrepancy(np.array([0.5, 0.5]), np.array([0.5, 0.5])) == 0.0
    assert discrepancy(np.array([1.0, 0.0]), np.array([0.5, 0.5])) == pytest.approx(np.log(2))
    with pytest.raises(ValueError, match="unknown discrepancy metric 'hamming'"):
        discrepancy(np.array([1.0]), np.array([1.0]), "hamming")
    with pytest.raises(ValueError, match="KL is infinite"):
        discrepancy(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="normalize_d"):
        disco_weights([1], [0.1], normalize_d="max")
