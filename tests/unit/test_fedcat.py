"""FedCat's schedule against the spec's checks (FedCat spec 1.12)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from server_app.strategies.fedcat_math import (
    ChainSchedule,
    chain_devices,
    copies_average,
    count_weights,
    cycle_position,
    pick_per_group,
)


def schedule(**kwargs) -> ChainSchedule:
    settings = {"num_devices": 100, "k": 10, "greedy_prob": 0.5, "regroup_every": 1, "seed": 0}
    return ChainSchedule(**{**settings, **kwargs})


def run(s: ChainSchedule, rounds: int) -> list[list[int]]:
    return [s.devices(r) for r in range(1, rounds + 1)]


def test_every_copy_meets_every_group_once_a_cycle_starting_at_its_own() -> None:
    s = schedule(num_devices=23, k=5, regroup_every=2)
    for cycle in range(6):
        rounds = range(cycle * 5 + 1, cycle * 5 + 6)
        chains = []
        for r in rounds:
            devices = s.devices(r)
            assert len(set(devices)) == 5  # no device holds two copies at once
            chains.append([int(s.group_of()[d]) for d in devices])
        by_copy = np.array(chains).T  # copy i -> groups visited, hop by hop
        for i, visited in enumerate(by_copy):
            assert visited[0] == i
            assert sorted(visited) == list(range(5))
            assert list(visited) == [(i + j) % 5 for j in range(5)]


def test_the_count_table_sums_to_the_picks() -> None:
    s = schedule(num_devices=37, k=6)
    run(s, 60)
    assert s.counts.sum() == 60 * 6
    assert s.counts.sum(axis=0).tolist() == [60] * 6


def test_groups_change_only_at_the_start_of_every_lam_th_cycle() -> None:
    s = schedule(num_devices=30, k=3, regroup_every=2)
    groups = []
    for r in range(1, 13):
        s.devices(r)
        groups.append(s.group_of())
    for r in range(1, 12):  # rounds 1-6 are cycles 0-1 (one draw), 7-12 cycles 2-3
        same = np.array_equal(groups[r - 1], groups[r])
        assert same == (r != 6), r
    assert sorted(np.bincount(groups[0]).tolist()) == [10, 10, 10]


def test_the_same_seed_picks_the_same_devices_and_another_does_not() -> None:
    assert run(schedule(), 40) == run(schedule(), 40)
    assert run(schedule(), 40) != run(schedule(seed=1), 40)


@pytest.mark.parametrize("stop", [1, 7, 10, 23])
@pytest.mark.parametrize("count_selection", [True, False])
def test_a_schedule_resumed_from_its_state_picks_what_the_uninterrupted_one_does(
    stop: int, count_selection: bool
) -> None:
    whole = run(schedule(count_selection=count_selection), 45)
    first = schedule(count_selection=count_selection)
    run(first, stop)
    resumed = schedule(count_selection=count_selection)
    resumed.load_state_dict({k: v.copy() for k, v in first.state_dict().items()})
    assert [resumed.devices(r) for r in range(stop + 1, 46)] == whole[stop:]


def test_greedy_picks_keep_every_group_level_at_every_position() -> None:
    """eps = 1 with groups fixed: counts within a group differ by at most 1, and after 500
    rounds (50 per position, 10 per member) by nothing."""
    s = schedule(greedy_prob=1.0, regroup_every=10_000)
    for r in range(1, 501):
        s.devices(r)
        groups = s.group_of()
        for g in range(10):
            counts = s.counts[groups == g]
            assert (counts.max(axis=0) - counts.min(axis=0)).max() <= 1
    assert s.counts.min() == s.counts.max() == 5


@pytest.mark.parametrize(
    ("greedy_prob", "low", "high"), [(1.0, 48, 53), (0.5, 44, 58), (0.0, 39, 62)]
)
def test_participation_spread_of_the_spec(greedy_prob: float, low: int, high: int) -> None:
    """N = 100, K = 10, lam = 1, 500 rounds, seed 0: 50 picks per device expected, and the
    spec's figures exactly (uniform sampling would spread them with sd 6.7)."""
    s = schedule(greedy_prob=greedy_prob)
    run(s, 500)
    picks = s.counts.sum(axis=1)
    assert (picks.min(), picks.max()) == (low, high)


def test_count_weights_are_smoothed_inverse_square_roots() -> None:
    np.testing.assert_allclose(
        count_weights(np.array([0, 1, 3])), [0.01**-0.5, 1.01**-0.5, 3.01**-0.5]
    )


def test_a_greedy_pick_is_the_least_used_member_and_ties_are_random() -> None:
    groups = [np.array([0, 1, 2]), np.array([3, 4])]
    counts = np.zeros((5, 2), dtype=np.int64)
    counts[:, 1] = [3, 1, 2, 0, 0]
    rng = np.random.default_rng(0)
    firsts = {
        pick_per_group(groups, counts.copy(), 1, greedy_prob=1.0, rng=rng)[1] for _ in range(40)
    }
    assert firsts == {3, 4}
    after = counts.copy()
    assert pick_per_group(groups, after, 1, greedy_prob=1.0, rng=rng)[0] == 1
    assert after[1, 1] == 2 and after[:, 0].sum() == 0


def test_a_proportional_pick_follows_the_weights() -> None:
    groups = [np.array([0, 1])]
    counts = np.array([[0], [99]])
    rng = np.random.default_rng(0)
    picks = [
        pick_per_group(groups, counts.copy(), 0, greedy_prob=0.0, rng=rng)[0] for _ in range(2000)
    ]
    expected = count_weights(np.array([0]))[0] / count_weights(np.array([0, 99])).sum()
    assert abs(picks.count(0) / 2000 - expected) < 0.01


def test_copy_i_takes_the_device_of_group_pos_plus_i() -> None:
    assert chain_devices([10, 11, 12, 13], 0) == [10, 11, 12, 13]
    assert chain_devices([10, 11, 12, 13], 3) == [13, 10, 11, 12]
    assert [cycle_position(r, 4) for r in (1, 4, 5, 8, 9)] == [0, 3, 0, 3, 0]


def test_a_cycle_of_fake_clients_adding_fixed_vectors_averages_exactly() -> None:
    """Each device adds its own v_d to the copy it receives; after one cycle the global model
    is w0 + sum_i acc_i (sum of v_d along chain i) / sum_i acc_i."""
    n, k = 12, 4
    rng = np.random.default_rng(5)
    v = rng.normal(size=(n, 3))
    samples = rng.integers(5, 50, size=n)
    w0 = rng.normal(size=3)
    s = schedule(num_devices=n, k=k)
    copies = [[w0.copy()] for _ in range(k)]
    acc = [0] * k
    chains: list[list[int]] = [[] for _ in range(k)]
    for r in range(1, k + 1):
        for i, d in enumerate(s.devices(r)):
            copies[i] = [copies[i][0] + v[d]]
            acc[i] += int(samples[d])
            chains[i].append(d)
    expected = w0 + sum(a * v[c].sum(axis=0) for a, c in zip(acc, chains, strict=True)) / sum(acc)
    (got,) = copies_average(copies, acc)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_copies_that_never_trained_drop_out_of_the_average() -> None:
    a, b = [np.array([1.0, 2.0])], [np.array([5.0, 6.0])]
    np.testing.assert_array_equal(copies_average([a, b], [3, 0])[0], [1.0, 2.0])
    assert copies_average([a, b], [0, 0]) is None


def test_without_count_selection_k_distinct_devices_are_drawn_uniformly() -> None:
    s = schedule(count_selection=False)
    rounds = run(s, 500)
    assert all(len(set(r)) == 10 for r in rounds)
    picks = np.bincount(np.concatenate(rounds), minlength=100)
    assert picks.sum() == 5000 and s.counts.sum() == 0
    assert picks.std() > 3  # binomial spread (sd about 6.7), not the count table's


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 101}, "algorithm.k must be in 1..100"),
        ({"k": 0}, "algorithm.k must be in 1..100"),
        ({"greedy_prob": 1.5}, "algorithm.eps must be in [0, 1]"),
        ({"regroup_every": 0}, "algorithm.lam must be an integer >= 1"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        schedule(**kwargs)
