"""A whole dataset in memory (`DatasetArrays`), as every source loads it, checked on creation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fl_system.data.files import DataError


@dataclass(frozen=True, eq=False)
class DatasetArrays:
    """A whole dataset in memory, already normalised."""

    x_train: np.ndarray  # float32, (N, C, H, W) for images, (N, D) for vectors
    y_train: np.ndarray  # int64, (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    groups: np.ndarray | None = None  # natural owner of each train sample (synthetic only)

    def __post_init__(self) -> None:
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise DataError(
                f"x/y length mismatch: train {len(self.x_train)}/{len(self.y_train)}, "
                f"test {len(self.x_test)}/{len(self.y_test)}"
            )
        if self.groups is not None and self.groups.shape != self.y_train.shape:
            raise DataError(f"groups has shape {self.groups.shape}, expected {self.y_train.shape}")
        check_labels(self.y_train, self.num_classes, "y_train")
        check_labels(self.y_test, self.num_classes, "y_test")


def check_labels(y: np.ndarray, num_classes: int, where: str) -> None:
    """DataError unless every label is in [0, num_classes)."""
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(
            f"{where}: labels span [{y.min()}, {y.max()}], expected [0, {num_classes - 1}]"
        )


def frozen(data: DatasetArrays) -> DatasetArrays:
    """`data` made read-only, so that no holder of a cached copy can change what the next
    caller gets."""
    for a in (data.x_train, data.y_train, data.x_test, data.y_test, data.groups):
        if a is not None:
            a.flags.writeable = False
    return data
