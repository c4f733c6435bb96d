"""Partition schemes: which train indices each client holds.

Every node recomputes the whole split from (labels, num_partitions, seed) and keeps its own
part, so `split` must be deterministic in those inputs. flwr-datasets partitioners are reused
where they match the papers' recipes; FedDisco's NIID-2 and the natural (per-user) split are
written here, FedGSNR's NonBalance and Pareto in `label_imbalance`. `datasets` and
`flwr_datasets` are imported lazily: they are slow to import and most processes never need
them.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from flwr_datasets.partitioner import Partitioner as FlwrPartitioner

__all__ = [
    "DirichletPartition",
    "IidPartition",
    "LabelGroupsPartition",
    "NaturalPartition",
    "Niid2Partition",
    "PartitionError",
    "Partitioner",
    "PathologicalPartition",
]


class PartitionError(ValueError):
    """A split that cannot be made; the message names the problem and the numbers."""


@runtime_checkable
class Partitioner(Protocol):
    """Maps labels to one sorted int64 index array per partition id 0..num_partitions-1."""

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]: ...


def checked_labels(labels: np.ndarray, num_partitions: int) -> np.ndarray:
    """Validate the common inputs; return labels as a 1-D int64 array."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise PartitionError(
            f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}"
        )
    if not 1 <= num_partitions <= len(labels):
        raise PartitionError(f"cannot split {len(labels)} samples into {num_partitions} partitions")
    return labels.astype(np.int64, copy=False)


def sorted_parts(parts: list[np.ndarray]) -> list[np.ndarray]:
    """Each part's indices, sorted, as int64: a split's canonical form."""
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _flwr_split(
    partitioner: FlwrPartitioner, labels: np.ndarray, num_partitions: int, order: np.ndarray
) -> list[np.ndarray]:
    """Run a flwr-datasets partitioner on the rows `order` of `labels`; return index arrays."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_dict({"label": labels[order], "index": order})
    partitioner.dataset = ds
    return sorted_parts(
        [partitioner.load_partition(i).with_format("numpy")["index"] for i in range(num_partitions)]
    )


@dataclass(frozen=True, kw_only=True)
class IidPartition:
    """Uniformly random, equal-size (within one) partitions."""

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        from flwr_datasets.partitioner import IidPartitioner

        labels = checked_labels(labels, num_partitions)
        # IidPartitioner cuts contiguous shards and never shuffles, so we shuffle first;
        # otherwise label-sorted data would come out as a label-skewed split.
        order = np.random.default_rng(seed).permutation(len(labels))
        return _flwr_split(IidPartitioner(num_partitions), labels, num_partitions, order)


@dataclass(frozen=True, kw_only=True)
class DirichletPartition:
    """NIID-1 label skew: per class, Dirichlet(alpha) shares, with self-balancing.

    With self_balancing a client already above the mean size gets no more samples (the
    NIID-Bench / FedDisco recipe); the draw is repeated until every client has min_size.
    """

    alpha: float = 0.5
    min_size: int = 10
    self_balancing: bool = True

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        from flwr_datasets.partitioner import DirichletPartitioner

        labels = checked_labels(labels, num_partitions)
        if not self.alpha > 0:
            raise PartitionError(f"dirichlet alpha must be > 0, got {self.alpha}")
        if isinstance(self.min_size, bool) or not isinstance(self.min_size, int):
            raise PartitionError(f"dirichlet min_size must be an integer >= 0, got {self.min_size}")
        if self.min_size < 0:
            raise PartitionError(f"dirichlet min_size must be an integer >= 0, got {self.min_size}")
        if self.min_size * num_partitions > len(labels):
            raise PartitionError(
                f"cannot give each of {num_partitions} partitions min_size={self.min_size} "
                f"samples from {len(labels)} samples"
            )
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=float(self.alpha),
            min_partition_size=self.min_size,
            self_balancing=self.self_balancing,
            shuffle=False,  # we sort the indices anyway
            seed=seed,
        )
        try:
            with warnings.catch_warnings():
                # flwr-datasets warns on every redraw; we report the final failure instead.
                warnings.simplefilter("ignore", UserWarning)
                return _flwr_split(partitioner, labels, num_partitions, np.arange(len(labels)))
        except ValueError as e:
            raise PartitionError(
                f"dirichlet split (alpha={self.alpha}) of {len(labels)} samples into "
                f"{num_partitions} partitions did not reach min_size={self.min_size} "
                f"for every partition in 11 draws; lower min_size or raise alpha ({e})"
            ) from e


@dataclass(frozen=True, kw_only=True)
class PathologicalPartition:
    """Each client holds exactly `classes_per_client` classes, sharing each class evenly.

    flwr-datasets' "first-deterministic" mode gives client i class i mod C first and draws the
    rest with the seed. Every mode gives each client its k classes with data (a class is split
    among its holders, and a class with fewer samples than holders is refused), but this one
    also uses every class whenever there are at least C clients, so no data are dropped; in
    "random" mode some classes can go unused.
    """

    classes_per_client: int = 2

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        from flwr_datasets.partitioner import PathologicalPartitioner

        labels = checked_labels(labels, num_partitions)
        num_classes = len(np.unique(labels))
        if not 1 <= self.classes_per_client <= num_classes:
            raise PartitionError(
                f"classes_per_client={self.classes_per_client} must be between 1 and the "
                f"{num_classes} classes present"
            )
        partitioner = PathologicalPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            num_classes_per_partition=self.classes_per_client,
            class_assignment_mode="first-deterministic",
            shuffle=False,
            seed=seed,
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "classes will NOT be used"
                return _flwr_split(partitioner, labels, num_partitions, np.arange(len(labels)))
        except ValueError as e:
            raise PartitionError(
                f"pathological split of {len(labels)} samples into {num_partitions} partitions "
                f"with {self.classes_per_client} classes each is impossible: {e}"
            ) from e


@dataclass(frozen=True, kw_only=True)
class Niid2Partition:
    """FedDisco NIID-2: K_b biased clients holding C/5 classes each, plus unbiased ones.

    Follows the FedDisco code (spec section 5): classes are blocks of (seed-shuffled) indices;
    biased client i takes classes (C/5*i + j) mod C, j < C/5, and from each the slice
    [5*shard*(i//5), 5*shard*(i//5 + 1)); unbiased client j takes from every class the slice
    of length shard starting at 5*shard*(K_b/5) + shard*j. All clients hold C*shard samples.
    shard = floor(N / (C*K)) as in the code, lowered to floor(min class size / K) when classes
    are unequal (which the code never meets) so that no slice runs past its class block.
    """

    num_unbiased: int = 1

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        labels = checked_labels(labels, num_partitions)
        k, k_u = num_partitions, self.num_unbiased
        k_b = k - k_u
        if not 0 <= k_u <= k:
            raise PartitionError(f"niid2 needs 0 <= num_unbiased ({k_u}) <= num_clients ({k})")
        if k_b % 5:
            raise PartitionError(
                f"niid2 needs the number of biased clients (num_clients - num_unbiased = "
                f"{k_b}) to be a multiple of 5"
            )
        classes, counts = np.unique(labels, return_counts=True)
        c = len(classes)
        if c % 5:
            raise PartitionError(f"niid2 needs the number of classes ({c}) to be a multiple of 5")
        shard = min(len(labels) // (c * k), int(counts.min()) // k)
        if shard == 0:
            raise PartitionError(
                f"niid2 shard is 0: the smallest class has {counts.min()} samples, "
                f"fewer than the {k} clients"
            )
        rng = np.random.default_rng(seed)
        blocks = [rng.permutation(np.flatnonzero(labels == cl)) for cl in classes]
        per_client = c // 5
        parts: list[np.ndarray] = []
        for i in range(k_b):
            lo = 5 * shard * (i // 5)
            own = [(per_client * i + j) % c for j in range(per_client)]
            parts.append(np.concatenate([blocks[cl][lo : lo + 5 * shard] for cl in own]))
        for j in range(k_u):
            lo = 5 * shard * (k_b // 5) + shard * j
            parts.append(np.concatenate([b[lo : lo + shard] for b in blocks]))
        return sorted_parts(parts)


@dataclass(frozen=True, kw_only=True)
class LabelGroupsPartition:
    """TACO's synthetic 3-group label skew (its spec 5): clients are shuffled into groups
    of near-equal size (20 clients: 7, 7, 6); a client of group g holds
    max(1, round(label_shares[g] * C)) labels (10 classes, shares 0.1, 0.2, 0.5: 1, 2, 5),
    the first being label (client id mod C) so that every label is held once there are C
    clients, the rest drawn at random. Each label's shuffled samples are split into equal
    parts among its holders (a label nobody holds goes unused), so clients holding more
    labels hold more data.
    """

    label_shares: tuple[float, ...] = (0.1, 0.2, 0.5)

    def groups_of(self, num_partitions: int, seed: int) -> np.ndarray:
        """The group index of every partition id (0 = the first share)."""
        order = np.random.default_rng(seed).permutation(num_partitions)
        groups = np.empty(num_partitions, dtype=np.int64)
        for g, members in enumerate(np.array_split(order, len(self.label_shares))):
            groups[members] = g
        return groups

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        labels = checked_labels(labels, num_partitions)
        shares = tuple(self.label_shares)
        if not shares or any(not 0 < share <= 1 for share in shares):
            raise PartitionError(f"label_groups label_shares must be in (0, 1], got {shares}")
        classes = np.unique(labels)
        c = len(classes)
        rng = np.random.default_rng([seed, 1])  # the group draw uses `seed` alone
        holdings = []
        for client, g in enumerate(self.groups_of(num_partitions, seed)):
            first = classes[client % c]
            others = rng.permutation(classes[classes != first])
            holdings.append([first, *others[: max(1, round(shares[g] * c)) - 1]])
        parts: list[list[np.ndarray]] = [[] for _ in range(num_partitions)]
        for cl in classes:
            holders = [i for i, held in enumerate(holdings) if cl in held]
            if not holders:  # fewer clients than labels: this label goes unused
                continue
            idx = rng.permutation(np.flatnonzero(labels == cl))
            if len(idx) < len(holders):
                raise PartitionError(
                    f"label_groups: label {cl} has {len(idx)} samples for {len(holders)} "
                    "clients holding it"
                )
            for client, piece in zip(holders, np.array_split(idx, len(holders)), strict=True):
                parts[client].append(piece)
        return sorted_parts([np.concatenate(p) for p in parts])


@dataclass(frozen=True, kw_only=True)
class NaturalPartition:
    """One partition per natural owner (`groups`, e.g. Synthetic's users), in group order."""

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        labels = checked_labels(labels, num_partitions)
        if groups is None:
            raise PartitionError(
                "natural partition needs groups (each sample's owner); this dataset has none"
            )
        groups = np.asarray(groups)
        if groups.shape != labels.shape:
            raise PartitionError(f"groups has shape {groups.shape} but labels have {labels.shape}")
        owners = np.unique(groups)
        if len(owners) != num_partitions:
            raise PartitionError(
                f"natural partition has {len(owners)} groups but {num_partitions} partitions "
                "were requested"
            )
        return sorted_parts([np.flatnonzero(groups == g) for g in owners])
