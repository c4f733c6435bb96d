"""Who this node is, and the training data it holds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import Context
from omegaconf import DictConfig

from fl_system.data.node_dir import load_node_dir
from fl_system.experiment import load_dataset, partition_indices


@dataclass(frozen=True)
class NodeIdentity:
    """The only things a client knows by itself (its node config)."""

    partition_id: int
    num_partitions: int
    data_dir: str | None = None
    device: str = "auto"

    @classmethod
    def from_context(cls, context: Context) -> NodeIdentity:
        cfg = context.node_config
        if "partition-id" not in cfg:
            raise ValueError("node config lacks 'partition-id' (start the SuperNode with it)")
        data_dir = cfg.get("data-dir")
        return cls(
            partition_id=int(cfg["partition-id"]),
            num_partitions=int(cfg.get("num-partitions", 0)),
            data_dir=str(data_dir) if data_dir else None,
            device=str(cfg.get("device", "auto")),
        )


def local_training_data(cfg: DictConfig, node: NodeIdentity) -> tuple[np.ndarray, np.ndarray]:
    """The node's own directory if it has one, else its partition of the shared dataset."""
    if node.data_dir:
        return load_node_dir(node.data_dir)
    num_partitions = int(cfg.num_clients)
    if node.num_partitions and node.num_partitions != num_partitions:
        raise ValueError(
            f"this SuperNode was started with num-partitions={node.num_partitions} "
            f"but the run has num_clients={num_partitions}"
        )
    if not 0 <= node.partition_id < num_partitions:
        raise ValueError(f"partition-id {node.partition_id} is outside 0..{num_partitions - 1}")
    data = load_dataset(cfg)
    idx = partition_indices(cfg, num_partitions)[node.partition_id]
    return data.x_train[idx], data.y_train[idx]
