"""The mean of weighted reply metrics: exact vectors, and the same bits in any order."""

import itertools
import math

import pytest

from server_app.federated.replies import weighted_mean


def test_weighted_mean_of_exact_vectors() -> None:
    assert weighted_mean([(1, 2.0), (3, 6.0)]) == 5.0
    assert weighted_mean([(2, 0.5)]) == 0.5
    assert math.isnan(weighted_mean([]))
    assert math.isnan(weighted_mean([(0, 1.0)]))


@pytest.mark.parametrize("scale", [2.0**-1000, 1.0, 2.0**1000])
def test_weighted_mean_is_scale_free(scale: float) -> None:
    assert weighted_mean([(1, 2.0 * scale), (3, 6.0 * scale)]) == 5.0 * scale


def test_every_order_of_the_same_replies_gives_the_same_bits() -> None:
    """Losses a plain left-to-right sum rounds differently by order (0.1 + 0.2 + 0.3 is not
    0.3 + 0.2 + 0.1): a round and an asynchronous step taking replies in another order agree."""
    pairs = [(1, 0.1), (1, 0.2), (1, 0.3), (7, 2.2836824333825376), (5, 1e-17)]
    plain = {sum(w * v for w, v in p) for p in itertools.permutations(pairs)}
    assert len(plain) > 1
    means = {weighted_mean(p) for p in itertools.permutations(pairs)}
    assert means == {math.fsum(w * v for w, v in pairs) / 15}
