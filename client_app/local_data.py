"""Who this node is, and the training data it holds."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Context
from omegaconf import DictConfig, OmegaConf

from client_app.state import default_state_root
from fl_system.data.node_dir import load_node_dir
from fl_system.experiment import load_dataset, partition_indices

# Bump when partitioning or preprocessing changes, so stale cached partitions are not reused.
_CACHE_VERSION = 1


@dataclass(frozen=True)
class NodeIdentity:
    """The only things a client knows by itself (its node config)."""

    partition_id: int
    num_partitions: int
    data_dir: str | None = None
    device: str = "auto"
    cache_dir: str | None = None
    state_dir: str | None = None

    @classmethod
    def from_context(cls, context: Context) -> NodeIdentity:
        cfg = context.node_config
        if "partition-id" not in cfg:
            raise ValueError("node config lacks 'partition-id' (start the SuperNode with it)")
        return cls(
            partition_id=int(cfg["partition-id"]),
            num_partitions=int(cfg.get("num-partitions", 0)),
            data_dir=str(cfg["data-dir"]) if cfg.get("data-dir") else None,
            device=str(cfg.get("device", "auto")),
            cache_dir=str(cfg["cache-dir"]) if cfg.get("cache-dir") else None,
            state_dir=str(cfg["state-dir"]) if cfg.get("state-dir") else None,
        )

    def state_root(self) -> Path:
        return Path(self.state_dir) if self.state_dir else default_state_root()

    def cache_root(self) -> Path:
        default = Path.home() / ".cache" / "fl_system"
        return Path(self.cache_dir or os.environ.get("FL_CACHE_DIR") or default)


def local_training_data(cfg: DictConfig, node: NodeIdentity) -> tuple[np.ndarray, np.ndarray]:
    """The node's own directory if it has one, else its partition of the shared dataset.

    A deployed ClientApp is a fresh process per message, so the partition is cached on the
    node's disk after the first round instead of re-deriving the whole dataset every round.
    """
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
    cached = node.cache_root() / f"partition-{_partition_key(cfg, node.partition_id)}.npz"
    if cached.is_file():
        with np.load(cached, allow_pickle=False) as f:
            return f["x"], f["y"]
    data = load_dataset(cfg)
    idx = partition_indices(cfg, num_partitions)[node.partition_id]
    x, y = data.x_train[idx], data.y_train[idx]
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, x=x, y=y)
    os.replace(tmp, cached)
    return x, y


def _partition_key(cfg: DictConfig, partition_id: int) -> str:
    spec = {
        "version": _CACHE_VERSION,
        "source": OmegaConf.to_container(cfg.dataset.source, resolve=True),
        "partition": OmegaConf.to_container(cfg.partition, resolve=True),
        "num_partitions": int(cfg.num_clients),
        "seed": int(cfg.seed),
        "partition_id": partition_id,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]
