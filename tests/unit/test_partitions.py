"""Partition schemes: disjointness, coverage, determinism, and each scheme's own shape."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.data import PartitionError
from fl_system.data.label_imbalance import NonBalancePartition, ParetoPartition
from fl_system.data.partitions import (
    DirichletPartition,
    IidPartition,
    LabelGroupsPartition,
    NaturalPartition,
    Niid2Partition,
    Partitioner,
    PathologicalPartition,
)

# 10 classes x 200 samples, in shuffled order (as a real dataset would be)
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 200))


def _assert_disjoint(parts: list[np.ndarray], n: int) -> np.ndarray:
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0), "each partition is sorted and has no repeats"
        assert p.size == 0 or (p[0] >= 0 and p[-1] < n)
    union = np.concatenate(parts)
    assert len(np.unique(union)) == len(union), "partitions overlap"
    return union


def _label_skew(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between client label histograms and the global one."""
    c = labels.max() + 1
    g = np.bincount(labels, minlength=c) / len(labels)
    return float(
        np.mean(
            [0.5 * np.abs(np.bincount(labels[p], minlength=c) / len(p) - g).sum() for p in parts]
        )
    )


SCHEMES: list[tuple[Partitioner, int]] = [
    (IidPartition(), 7),
    (DirichletPartition(alpha=0.5), 10),
    (PathologicalPartition(classes_per_client=2), 10),
    (Niid2Partition(num_unbiased=1), 6),
    (NonBalancePartition(), 10),
    (ParetoPartition(), 10),
    (LabelGroupsPartition(), 20),
]


@pytest.mark.parametrize(("scheme", "k"), SCHEMES, ids=[type(s).__name__ for s, _ in SCHEMES])
def test_scheme_is_deterministic_and_disjoint(scheme: Partitioner, k: int) -> None:
    assert isinstance(scheme, Partitioner)
    a = scheme.split(LABELS, k, seed=1)
    b = scheme.split(LABELS, k, seed=1)
    c = scheme.split(LABELS, k, seed=2)
    assert len(a) == k
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))
    union = _assert_disjoint(a, len(LABELS))
    if not isinstance(scheme, Niid2Partition):  # NIID-2 leaves a remainder unused
        assert len(union) == len(LABELS)


def test_iid_sizes_and_balance() -> None:
    parts = IidPartition().split(LABELS, 7, seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 2000
    assert _label_skew(LABELS, parts) < 0.1
    # not contiguous shards of the original order
    assert not np.array_equal(parts[0], np.arange(len(parts[0])))


def test_dirichlet_min_size_and_skew() -> None:
    skewed = DirichletPartition(alpha=0.1, min_size=20).split(LABELS, 10, seed=0)
    _assert_disjoint(skewed, len(LABELS))
    assert min(len(p) for p in skewed) >= 20
    mild = DirichletPartition(alpha=100.0).split(LABELS, 10, seed=0)
    assert _label_skew(LABELS, skewed) > 0.5
    assert _label_skew(LABELS, mild) < 0.1
    # most clients miss at least one class at alpha = 0.1
    assert sum(len(np.unique(LABELS[p])) < 10 for p in skewed) >= 5


def test_dirichlet_unreachable_min_size() -> None:
    with pytest.raises(PartitionError, match="min_size=10"):
        DirichletPartition(alpha=0.01, min_size=10).split(LABELS[:100], 10, seed=0)
    with pytest.raises(PartitionError, match="each of 10 partitions min_size=300"):
        DirichletPartition(min_size=300).split(LABELS, 10, seed=0)


@pytest.mark.parametrize(("k", "classes"), [(10, 2), (20, 3), (5, 1)])
def test_pathological_exact_classes(k: int, classes: int) -> None:
    parts = PathologicalPartition(classes_per_client=classes).split(LABELS, k, seed=4)
    union = _assert_disjoint(parts, len(LABELS))
    assert [len(np.unique(LABELS[p])) for p in parts] == [classes] * k
    if k >= 10:  # first-deterministic: every class is used, so nothing is dropped
        assert len(union) == len(LABELS)


def test_pathological_too_many_classes() -> None:
    with pytest.raises(PartitionError, match="classes_per_client=11"):
        PathologicalPartition(classes_per_client=11).split(LABELS, 10, seed=0)


def test_niid2_cifar10_shape() -> None:
    # 100 per class, K = 6: shard = floor(1000 / 60) = 16, so each client holds 160
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 100))
    parts = Niid2Partition(num_unbiased=1).split(labels, 6, seed=0)
    _assert_disjoint(parts, len(labels))
    assert [len(p) for p in parts] == [160] * 6
    for i in range(5):
        counts = np.bincount(labels[parts[i]], minlength=10)
        assert set(np.flatnonzero(counts)) == {2 * i, 2 * i + 1}
        assert counts[2 * i] == counts[2 * i + 1] == 80
    assert np.bincount(labels[parts[5]], minlength=10).tolist() == [16] * 10


def test_niid2_two_groups_and_two_unbiased() -> None:
    labels = np.repeat(np.arange(10), 120)
    parts = Niid2Partition(num_unbiased=2).split(labels, 12, seed=3)  # 10 biased + 2 unbiased
    _assert_disjoint(parts, len(labels))
    shard = 1200 // (10 * 12)
    assert [len(p) for p in parts] == [10 * shard] * 12
    for i in range(10):
        assert set(labels[parts[i]]) == {(2 * i) % 10, (2 * i + 1) % 10}
    for j in (10, 11):
        assert np.bincount(labels[parts[j]], minlength=10).tolist() == [shard] * 10


def test_niid2_twenty_classes() -> None:
    labels = np.repeat(np.arange(20), 30)
    parts = Niid2Partition().split(labels, 6, seed=0)
    _assert_disjoint(parts, len(labels))
    for i in range(5):
        assert set(labels[parts[i]]) == {4 * i, 4 * i + 1, 4 * i + 2, 4 * i + 3}
    assert len(set(labels[parts[5]])) == 20
    assert len({len(p) for p in parts}) == 1


def test_niid2_errors() -> None:
    with pytest.raises(PartitionError, match=r"num_clients - num_unbiased = 7\) .*multiple of 5"):
        Niid2Partition(num_unbiased=1).split(LABELS, 8, seed=0)
    with pytest.raises(PartitionError, match="number of classes \\(4\\)"):
        Niid2Partition().split(np.repeat(np.arange(4), 50), 6, seed=0)
    with pytest.raises(PartitionError, match="num_unbiased \\(9\\)"):
        Niid2Partition(num_unbiased=9).split(LABELS, 6, seed=0)


@pytest.mark.parametrize(
    "scheme", [IidPartition(), DirichletPartition(), PathologicalPartition(), Niid2Partition()]
)
def test_too_many_partitions(scheme: Partitioner) -> None:
    labels = np.arange(1797) % 10
    with pytest.raises(PartitionError, match="cannot split 1797 samples into 5000 partitions"):
        scheme.split(labels, 5000, seed=0)


def test_bad_labels() -> None:
    with pytest.raises(PartitionError, match="1-D integer"):
        IidPartition().split(np.zeros((4, 2)), 2, seed=0)


def test_natural_partition() -> None:
    groups = np.array([2, 0, 0, 1, 2, 2, 1, 0])
    labels = np.arange(8) % 3
    parts = NaturalPartition().split(labels, 3, seed=0, groups=groups)
    assert [p.tolist() for p in parts] == [[1, 2, 7], [3, 6], [0, 4, 5]]
    with pytest.raises(PartitionError, match="needs groups"):
        NaturalPartition().split(labels, 3, seed=0)
    with pytest.raises(PartitionError, match="3 groups but 4 partitions"):
        NaturalPartition().split(labels, 4, seed=0, groups=groups)


def _labels_held(parts: list[np.ndarray]) -> list[int]:
    return [len(np.unique(LABELS[p])) for p in parts]


def test_nonbalance_rich_medium_and_poor_clients() -> None:
    """K = 30: 3 clients with all 10 labels, 12 with 5, 15 with 2; all data dealt out."""
    parts = NonBalancePartition().split(LABELS, 30, seed=0)
    assert _labels_held(parts) == [10] * 3 + [5] * 12 + [2] * 15
    assert len(_assert_disjoint(parts, len(LABELS))) == len(LABELS)
    sizes = [len(p) for p in parts]
    assert min(sizes[:3]) > max(sizes[15:])  # the rich hold more than the poor


def test_pareto_few_clients_hold_many_labels() -> None:
    parts = ParetoPartition().split(LABELS, 30, seed=0)
    held = _labels_held(parts)
    assert max(held) == 10  # the largest draw holds every label, so all data is used
    assert len(_assert_disjoint(parts, len(LABELS))) == len(LABELS)
    assert min(held) >= 1 and np.median(held) <= 2
    assert sum(h >= 5 for h in held) < 10


def test_label_groups_hold_one_two_and_five_labels() -> None:
    """20 clients: groups of 7, 7 and 6 holding 1, 2 and 5 of the 10 labels, client j holds
    label j mod 10, every label is split equally among its holders (TACO spec 5)."""
    scheme = LabelGroupsPartition()
    parts = scheme.split(LABELS, 20, seed=3)
    groups = scheme.groups_of(20, seed=3)
    assert np.bincount(groups).tolist() == [7, 7, 6]
    assert _labels_held(parts) == [(1, 2, 5)[g] for g in groups]
    for j, p in enumerate(parts):
        assert j % 10 in LABELS[p]
    for label in range(10):
        shares = [np.count_nonzero(LABELS[p] == label) for p in parts]
        held = [n for n in shares if n]
        assert sum(held) == 200 and max(held) - min(held) <= 1
    assert np.mean([len(parts[j]) for j in np.flatnonzero(groups == 2)]) > np.mean(
        [len(parts[j]) for j in np.flatnonzero(groups == 0)]
    )


def test_label_groups_refuse_bad_shares() -> None:
    with pytest.raises(PartitionError, match=r"label_shares must be in \(0, 1\]"):
        LabelGroupsPartition(label_shares=(0.1, 1.5)).split(LABELS, 10, seed=0)


def test_dealing_by_class_names_partitions_left_empty() -> None:
    few = np.repeat(np.arange(10), 2)  # 20 samples: 30 clients cannot all get one
    with pytest.raises(PartitionError, match="without samples: too few samples per class"):
        NonBalancePartition().split(np.concatenate([few, few]), 30, seed=0)


@pytest.mark.parametrize(
    ("scheme", "message"),
    [
        (NonBalancePartition(rich=0.7, medium=0.4), r"rich \+ medium must be at most 1"),
        (NonBalancePartition(poor_labels=1.5), r"poor_labels must be in \[0, 1\]"),
        (ParetoPartition(shape=0), "pareto shape and x_min must be > 0"),
    ],
)
def test_bad_imbalance_settings_are_named(scheme: Partitioner, message: str) -> None:
    with pytest.raises(PartitionError, match=message):
        scheme.split(LABELS, 10, seed=0)
