"""Federated normalisation statistics equal numpy's over the union, at any scale."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.data.node_data.statistics import combine, node_moments
from fl_system.data.node_data.task import Feature, Task

IMAGES = Task(kind="images", classes=("a", "b"), image_size=(4, 5), channels=3)
TABLE = Task(
    kind="table",
    classes=("a", "b"),
    features=(Feature("h", "float"), Feature("k", "category", ("x", "y")), Feature("w", "int")),
)


def test_images_per_channel_match_numpy_over_the_union():
    rng = np.random.default_rng(0)
    nodes = [rng.integers(0, 256, (n, 3, 4, 5), dtype=np.uint8) for n in (7, 1, 30)]
    mean, std = combine([node_moments(x, IMAGES) for x in nodes])
    union = np.concatenate(nodes).astype(np.float64) / 255.0
    np.testing.assert_allclose(mean, union.mean(axis=(0, 2, 3)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(std, union.std(axis=(0, 2, 3)), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("centre", "spread"), [(0.0, 1e-6), (1.0, 1.0), (1e8, 1e-2), (1e12, 5.0)])
def test_table_numeric_features_match_numpy_at_any_scale(centre, spread):
    rng = np.random.default_rng(1)
    nodes = []
    for n in (50, 3, 200):
        h = centre + spread * rng.normal(size=n)
        onehot = np.eye(2)[rng.integers(0, 2, n)]
        w = -centre + spread * rng.normal(size=n)
        nodes.append(np.column_stack([h, onehot, w]))
    mean, std = combine([node_moments(x, TABLE) for x in nodes])
    union = np.concatenate(nodes)[:, [0, 3]]
    np.testing.assert_allclose(mean, union.mean(axis=0), rtol=1e-12, atol=1e-12 * spread)
    np.testing.assert_allclose(std, union.std(axis=0), rtol=1e-6)


def test_a_constant_feature_is_not_scaled():
    x = np.column_stack([np.full(4, 3.0), np.eye(2)[[0, 1, 0, 1]], np.arange(4.0)])
    mean, std = combine([node_moments(x, TABLE)])
    assert mean == [3.0, 1.5] and std[0] == 1.0 and std[1] == pytest.approx(np.std(np.arange(4)))
