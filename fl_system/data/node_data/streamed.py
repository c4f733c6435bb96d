"""Records too large to hold normalised in memory, read a batch at a time.

A node's decoded records live in its cache as `.npy` files, memory-mapped: the operating
system pages in what a batch touches and drops it under pressure. Normalised float32 copies
weigh four times an image folder's uint8 pixels (200,000 RGB 64x64 images: 2.5 GB of pixels,
9.8 GB as floats), so past `IN_MEMORY_MB` (`FL_IN_MEMORY_MB` in a node's environment) a node
trains on a `Streamed` view instead: indexing it (a slice, or a batch's index array) reads
those rows from the map and normalises just them. Below it, the fast path stays: one
normalised array, moved to the device once.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

IN_MEMORY_MB = 1024.0  # normalised float32 records up to this size are held in memory
IN_MEMORY_ENV = "FL_IN_MEMORY_MB"  # a node's own limit (its environment), in MiB


class Streamed:
    """Rows of a (memory-mapped) array, normalised as they are read.

    Parameters
    ----------
    base : np.ndarray
        The records as read (uint8 images, float32 table rows), usually an `np.memmap`.
    normalise : callable
        Raw records -> the float32 records the model takes (`node_data.normalised`).
    rows : np.ndarray, optional
        Which rows of `base` this view holds, in order (a local train/test split); all when
        None.
    """

    def __init__(
        self,
        base: np.ndarray,
        normalise: Callable[[np.ndarray], np.ndarray],
        rows: np.ndarray | None = None,
    ) -> None:
        self.base = base
        self.normalise = normalise
        self.rows = rows

    def __len__(self) -> int:
        return len(self.base) if self.rows is None else len(self.rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), *self.base.shape[1:])

    @property
    def nbytes(self) -> int:
        """What the view would weigh held normalised in memory (float32)."""
        return int(np.prod(self.shape)) * 4

    def __getitem__(self, index) -> np.ndarray:
        """The normalised records at `index` (a slice, an integer array or a torch tensor)."""
        if isinstance(index, slice) and self.rows is None:
            return self.normalise(np.asarray(self.base[index]))
        picked = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index)
        if self.rows is not None:
            picked = self.rows[picked]
        order = np.argsort(picked, kind="stable")  # the map read in file order
        raw = np.empty((len(picked), *self.base.shape[1:]), self.base.dtype)
        raw[order] = self.base[picked[order]]
        return self.normalise(raw)

    def subset(self, index: np.ndarray) -> Streamed:
        """The view of rows `index` of this one (no record is read)."""
        rows = np.asarray(index) if self.rows is None else self.rows[np.asarray(index)]
        return Streamed(self.base, self.normalise, rows)


def streams(shape: tuple[int, ...]) -> bool:
    """Whether records of `shape`, normalised, are too large to hold in memory."""
    limit = float(os.environ.get(IN_MEMORY_ENV) or IN_MEMORY_MB)
    return int(np.prod(shape)) * 4 > limit * 2**20
