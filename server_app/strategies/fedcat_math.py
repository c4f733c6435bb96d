"""FedCat's schedule as plain functions on arrays (FedCat spec 1.3, 1.4, 1.6, 1.10, 5).

K model copies travel along chains of devices. A cycle is K rounds; in the round at cycle
position pos = (round - 1) mod K, one device is picked from each of K random groups and copy i
goes to the device picked in group (pos + i) mod K, so over a cycle every copy meets every group
once. A pick is epsilon-greedy over the count weights 1 / sqrt(count[device, pos]): with
probability `greedy_prob` the least-used member at this position (ties broken at random),
otherwise a member drawn in proportion to its weight. Groups are redrawn every `regroup_every`
cycles. At a cycle's end the global model is the average of the copies weighted by the samples
each accumulated (Eq. 3).

Devices are partition ids 0..N-1, so a seed gives the same chains in every runtime.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np

from fl_system.learning.aggregation import weighted_average

COUNT_SMOOTHING = 0.01  # count weights (count + 0.01)^-1/2: 1/sqrt(0) is undefined (spec 5.1)


def cycle_position(server_round: int, k: int) -> int:
    """pos in 0..K-1 of a 1-based round."""
    return (server_round - 1) % k


def random_groups(num_devices: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random partition of the devices into K groups of sizes floor(N/K) or ceil(N/K), each
    listing its members in the drawn order (which the picks below depend on)."""
    return np.array_split(rng.permutation(num_devices), k)


def count_weights(counts: np.ndarray) -> np.ndarray:
    """1 / sqrt(count), smoothed so that an unused device weighs about 10."""
    return (np.asarray(counts, dtype=np.float64) + COUNT_SMOOTHING) ** -0.5


def pick_per_group(
    groups: Sequence[np.ndarray],
    counts: np.ndarray,
    pos: int,
    *,
    greedy_prob: float,
    rng: np.random.Generator,
) -> list[int]:
    """One device from each group, in group order; counts[d, pos] += 1 for each pick (in
    place: a pick counts when made, whether or not the device then trains)."""
    chosen = []
    for members in groups:
        w = count_weights(counts[members, pos])
        if rng.random() < greedy_prob:
            device = int(rng.choice(members[w == w.max()]))
        else:
            device = int(rng.choice(members, p=w / w.sum()))
        counts[device, pos] += 1
        chosen.append(device)
    return chosen


def chain_devices(chosen: Sequence[int], pos: int) -> list[int]:
    """The device of copy i this round: the one picked in group (pos + i) mod K."""
    k = len(chosen)
    return [int(chosen[(pos + i) % k]) for i in range(k)]


def copies_average(
    copies: Sequence[Sequence[np.ndarray]], samples: Sequence[float]
) -> list[np.ndarray] | None:
    """sum_i samples_i copy_i / sum_i samples_i over the copies that trained (Eq. 3); None if
    none did."""
    used = [(c, n) for c, n in zip(copies, samples, strict=True) if n > 0]
    if not used:
        return None
    return weighted_average([c for c, _ in used], [n for _, n in used])


class ChainSchedule:
    """Which device holds each copy in each round, and the count table behind the picks.

    One generator, seeded with the run's seed, draws the groups and the picks in the spec's
    order (so seed 0 gives the spec's figures); its state, the groups and the counts are the
    checkpoint. `count_selection=False` is the ablation "FedCat w/ DC": K devices drawn
    uniformly without replacement from all N each round, no groups, no counts (a chain may
    meet a device twice). Whether copies are chained or averaged every round ("w/ GC") is the
    strategy's business: the picks are the same.
    """

    def __init__(
        self,
        *,
        num_devices: int,
        k: int,
        greedy_prob: float,
        regroup_every: int,
        seed: int,
        count_selection: bool = True,
    ) -> None:
        if not 1 <= k <= num_devices:
            raise ValueError(f"algorithm.k must be in 1..{num_devices} (the clients), got {k}")
        if not 0.0 <= greedy_prob <= 1.0:
            raise ValueError(f"algorithm.eps must be in [0, 1], got {greedy_prob}")
        if regroup_every < 1:
            raise ValueError(f"algorithm.lam must be an integer >= 1, got {regroup_every}")
        self.num_devices, self.k = int(num_devices), int(k)
        self.greedy_prob, self.regroup_every = float(greedy_prob), int(regroup_every)
        self.count_selection = bool(count_selection)
        self.rng = np.random.default_rng(int(seed))
        self.counts = np.zeros((self.num_devices, self.k), dtype=np.int64)
        self.groups: list[np.ndarray] = []

    def devices(self, server_round: int) -> list[int]:
        """Device (partition id) of copy 0..K-1 in this 1-based round; call once per round,
        in order: it advances the generator and the counts."""
        pos = cycle_position(server_round, self.k)
        if not self.count_selection:
            return [int(d) for d in self.rng.choice(self.num_devices, self.k, replace=False)]
        if (server_round - 1) % (self.regroup_every * self.k) == 0:
            self.groups = random_groups(self.num_devices, self.k, self.rng)
        chosen = pick_per_group(
            self.groups, self.counts, pos, greedy_prob=self.greedy_prob, rng=self.rng
        )
        return chain_devices(chosen, pos)

    def group_of(self) -> np.ndarray:
        """Group id of every device (-1 before the first draw)."""
        ids = np.full(self.num_devices, -1, dtype=np.int64)
        for g, members in enumerate(self.groups):
            ids[members] = g
        return ids

    def state_dict(self) -> dict[str, np.ndarray]:
        """Counts, groups (members in drawn order) and the generator's state."""
        order = np.concatenate(self.groups) if self.groups else np.zeros(0, dtype=np.int64)
        rng_state = json.dumps(self.rng.bit_generator.state).encode()
        return {
            "fedcat/counts": self.counts.copy(),
            "fedcat/groups": order.astype(np.int64),
            "fedcat/rng": np.frombuffer(rng_state, dtype=np.uint8).copy(),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        counts, order = np.asarray(state["fedcat/counts"]), np.asarray(state["fedcat/groups"])
        if counts.shape != self.counts.shape or order.size not in (0, self.num_devices):
            raise ValueError(
                f"fedcat schedule state has counts {counts.shape} and {order.size} grouped "
                f"devices, expected {self.counts.shape} and {self.num_devices}"
            )
        self.counts = counts.astype(np.int64)
        self.groups = np.array_split(order.astype(np.int64), self.k) if order.size else []
        self.rng.bit_generator.state = json.loads(np.asarray(state["fedcat/rng"]).tobytes())
