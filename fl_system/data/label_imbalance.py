"""FedGSNR's label-imbalance schemes (its Appendix D): NonBalance and Pareto, where a few
clients hold many labels and the rest few; every sample of a class goes to one of the clients
holding that class, so all data is used."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fl_system.data.partitions import PartitionError, checked_labels, sorted_parts

__all__ = ["NonBalancePartition", "ParetoPartition"]


def _deal_by_class(
    labels: np.ndarray, holdings: list[np.ndarray], rng: np.random.Generator, scheme: str
) -> list[np.ndarray]:
    """Each sample of class c to a uniformly random client among those holding c.

    Classes nobody holds are left out. Every client must end with at least one sample.
    """
    classes = np.unique(labels)
    parts: list[list[np.ndarray]] = [[] for _ in holdings]
    for cl in classes:
        holders = [i for i, held in enumerate(holdings) if cl in held]
        if not holders:
            continue
        idx = np.flatnonzero(labels == cl)
        owner = rng.integers(0, len(holders), size=len(idx))
        for j, client in enumerate(holders):
            parts[client].append(idx[owner == j])
    merged = [np.concatenate(p) if p else np.empty(0, np.int64) for p in parts]
    empty = [i for i, p in enumerate(merged) if len(p) == 0]
    if empty:
        raise PartitionError(
            f"{scheme} split of {len(labels)} samples into {len(holdings)} partitions left "
            f"partitions {empty} without samples: too few samples per class"
        )
    return sorted_parts(merged)


@dataclass(frozen=True, kw_only=True)
class NonBalancePartition:
    """FedGSNR's NonBalance (information imbalance, its Appendix D).

    The first round(rich * K) clients (at least one, so every class is held) hold all C
    labels, the next round(medium * K) a random round(medium_labels * C) labels each, the rest
    a random round(poor_labels * C) labels each (at least one label). Each sample of class c
    goes to a uniformly random client among those holding c, so all data is used.
    """

    rich: float = 0.1
    medium: float = 0.4
    medium_labels: float = 0.5
    poor_labels: float = 0.2

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        labels = checked_labels(labels, num_partitions)
        for name in ("rich", "medium", "medium_labels", "poor_labels"):
            if not 0 <= getattr(self, name) <= 1:
                raise PartitionError(
                    f"nonbalance {name} must be in [0, 1], got {getattr(self, name)}"
                )
        if self.rich + self.medium > 1:
            raise PartitionError(
                f"nonbalance rich + medium must be at most 1, got {self.rich + self.medium}"
            )
        classes = np.unique(labels)
        c, k = len(classes), num_partitions
        n_rich = max(1, round(self.rich * k))
        n_medium = min(k - n_rich, round(self.medium * k))
        rng = np.random.default_rng(seed)
        n_poor = k - n_rich - n_medium
        shares = [1.0] * n_rich + [self.medium_labels] * n_medium + [self.poor_labels] * n_poor
        holdings = [
            rng.choice(classes, size=max(1, round(share * c)), replace=False) for share in shares
        ]
        return _deal_by_class(labels, holdings, rng, "nonbalance")


@dataclass(frozen=True, kw_only=True)
class ParetoPartition:
    """FedGSNR's Pareto partition (its Appendix D): few clients hold many labels.

    Draw x_i ~ Pareto(shape, x_min) for the K clients, normalise by the largest, give client i
    max(1, round(x_i / max x * C)) random labels (the largest draw holds all C), then deal the
    samples as NonBalance does.
    """

    shape: float = 1.16
    x_min: float = 1.0

    def split(
        self,
        labels: np.ndarray,
        num_partitions: int,
        seed: int,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        labels = checked_labels(labels, num_partitions)
        if self.shape <= 0 or self.x_min <= 0:
            raise PartitionError(
                f"pareto shape and x_min must be > 0, got {self.shape} and {self.x_min}"
            )
        classes = np.unique(labels)
        rng = np.random.default_rng(seed)
        draws = (rng.pareto(self.shape, num_partitions) + 1) * self.x_min
        counts = np.maximum(1, np.rint(draws / draws.max() * len(classes))).astype(int)
        holdings = [rng.choice(classes, size=n, replace=False) for n in counts]
        return _deal_by_class(labels, holdings, rng, "pareto")
