"""What every reader of node-held data hands back, and how bad records are dealt with."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fl_system.data.files import DataError


@dataclass
class Part:
    """The records of one part (train or test) of a node's data, not yet normalised:
    images as uint8 (N, C, H, W), tables as float32 (N, D); labels int64 (N,)."""

    x: np.ndarray
    y: np.ndarray


@dataclass
class Read:
    """A reader's result: its parts, and what it found (for the node's report)."""

    parts: dict[str, Part]
    classes: tuple[str, ...] = ()
    columns: dict[str, str] = field(default_factory=dict)
    unconverted: tuple[str, ...] = ()
    image_modes: tuple[str, ...] = ()
    skipped: int = 0


class BadRecords:
    """Counts the records left out under `dataset.on_bad_record=skip`; under `stop`, the
    first one stops the read with a DataError naming where it is and what is wrong."""

    def __init__(self, policy: str) -> None:
        self.skip = policy == "skip"
        self.count = 0

    def found(self, where: str, problem: str) -> None:
        if not self.skip:
            raise DataError(
                f"{where}: {problem} (dataset.on_bad_record=skip leaves such records out)"
            )
        self.count += 1
