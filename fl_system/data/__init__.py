"""Data layer: dataset sources, on-disk readers, partition schemes and per-node data dirs."""

from fl_system.data.partitions import PartitionError
from fl_system.data.sources import DataError, DatasetArrays

__all__ = ["DataError", "DatasetArrays", "PartitionError"]
