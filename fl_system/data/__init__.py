"""Data layer: dataset sources, on-disk readers, partition schemes and per-node data dirs."""

from fl_system.data.arrays import DatasetArrays
from fl_system.data.files import DataError
from fl_system.data.partitions import PartitionError

__all__ = ["DataError", "DatasetArrays", "PartitionError"]
