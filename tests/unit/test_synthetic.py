"""FedProx Synthetic(alpha, beta): determinism, user groups, class count."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from fl_system.data.sources import Synthetic
from fl_system.data.synthetic import generate_synthetic

ARGS = {"alpha": 0.5, "beta": 0.5, "num_users": 6, "dimension": 12, "num_classes": 5}


def test_generator_is_deterministic_per_seed() -> None:
    a = generate_synthetic(**ARGS, seed=7)
    b = generate_synthetic(**ARGS, seed=7)
    c = generate_synthetic(**ARGS, seed=8)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.user, b.user)
    assert a.x.shape != c.x.shape or not np.array_equal(a.x, c.x)


def test_generator_shapes_and_cap() -> None:
    data = generate_synthetic(**ARGS, seed=0, max_samples_per_user=80)
    sizes = np.bincount(data.user, minlength=6)
    assert np.all(sizes >= 50) and np.all(sizes <= 80)
    assert data.x.shape == (sizes.sum(), 12) and data.x.dtype == np.float32
    assert data.y.dtype == np.int64 and data.user.dtype == np.int64
    assert data.y.min() >= 0 and data.y.max() < 5
    assert np.all(np.diff(data.user) >= 0)  # grouped by user, users in order


def test_source_groups_match_generated_users() -> None:
    source = Synthetic(**ARGS, test_fraction=0.25, seed=3)
    d = source.load()
    raw = generate_synthetic(**ARGS, seed=3)
    assert d.num_classes == 5
    assert d.x_train.shape[1] == 12 and d.x_train.dtype == np.float32
    assert d.groups is not None and d.groups.shape == d.y_train.shape
    assert d.groups.dtype == np.int64
    assert len(d.y_train) + len(d.y_test) == len(raw.y)
    for k in range(6):
        n_k = int((raw.user == k).sum())
        mine = d.groups == k
        assert mine.sum() == int(0.75 * n_k)
        # every train row of group k is one of user k's generated rows, with its label
        own = raw.user == k
        rows = {r.tobytes(): lab for r, lab in zip(raw.x[own], raw.y[own], strict=True)}
        for row, lab in zip(d.x_train[mine], d.y_train[mine], strict=True):
            assert rows[row.tobytes()] == lab


@pytest.mark.parametrize("num_classes", [3, 10])
def test_num_classes_respected(num_classes: int) -> None:
    d = Synthetic(num_users=4, num_classes=num_classes, seed=1).load()
    assert d.num_classes == num_classes
    assert d.y_train.max() < num_classes and d.y_test.max() < num_classes
    assert d.y_train.min() >= 0


def test_source_is_deterministic_and_seed_sensitive() -> None:
    a = Synthetic(num_users=3, seed=5).load()
    b = Synthetic(num_users=3, seed=5)._read()
    c = Synthetic(num_users=3, seed=6).load()
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.groups, b.groups)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert a.x_train.shape != c.x_train.shape or not np.array_equal(a.x_train, c.x_train)


def test_the_arrays_are_those_the_first_generator_drew() -> None:
    """Drawn user by user into their places now; the same bits as the concatenating version
    (its digest), which caches on users' machines hold."""
    d = Synthetic(num_users=30, seed=0)._read()
    digest = hashlib.sha256()
    for a in (d.x_train, d.y_train, d.x_test, d.y_test, d.groups):
        digest.update(np.ascontiguousarray(a).tobytes())
    assert (len(d.y_train), len(d.y_test)) == (4298, 1087)
    assert digest.hexdigest() == "24d86b1822b6b1e2a1283438a59d1cdc72d56b4e9a92a419139711d15cb5d36d"
