"""Partitions cached on disk: each node's slice of a shared dataset, keyed by what defines it.

A deployed ClientApp is a fresh process per message, so a node reads its partition from this
cache instead of re-deriving the whole dataset every round. `prepare` writes every partition
of an experiment at once: the local runtime calls it before starting its SuperNodes, so that
round 1 does not have N nodes loading and partitioning the same dataset at the same time.
A process that serves many messages (a simulation worker plays many clients) also keeps the
partitions it read in memory, up to MEMORY_BYTES, instead of re-reading a file per message.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from fl_system.data.configured import load_dataset, partition_indices
from fl_system.data.dataset_cache import mapped_briefly

# Bump when partitioning or preprocessing changes, so stale cached partitions are not reused.
_CACHE_VERSION = 1
MEMORY_BYTES = 256 * 1024 * 1024  # partitions kept in one process's memory, least recent out

_in_memory: OrderedDict[Path, tuple[np.ndarray, np.ndarray]] = OrderedDict()


def partition_file(cfg: DictConfig, partition_id: int, root: Path) -> Path:
    return root / f"partition-{_partition_key(cfg, partition_id)}.npz"


def cached_partition(
    cfg: DictConfig, partition_id: int, root: Path
) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one partition, from memory, the cache or computed and cached.

    The arrays may be shared with later calls: read them, do not modify them in place.
    """
    path = partition_file(cfg, partition_id, root)
    if path in _in_memory:
        _in_memory.move_to_end(path)
        return _in_memory[path]
    if not path.is_file():
        prepare(cfg, root, [partition_id])
    with np.load(path, allow_pickle=False) as f:
        data = f["x"], f["y"]
    _keep_in_memory(path, data)
    return data


def _keep_in_memory(path: Path, data: tuple[np.ndarray, np.ndarray]) -> None:
    _in_memory[path] = data
    while sum(x.nbytes + y.nbytes for x, y in _in_memory.values()) > MEMORY_BYTES:
        _in_memory.popitem(last=False)


def prepare(cfg: DictConfig, root: Path, partition_ids: list[int] | None = None) -> None:
    """Cache the given partitions (all by default) that are missing."""
    num_partitions = int(cfg.num_clients)
    wanted = range(num_partitions) if partition_ids is None else partition_ids
    missing = [p for p in wanted if not partition_file(cfg, p, root).is_file()]
    if not missing:
        return
    data = load_dataset(cfg)
    indices = partition_indices(cfg, num_partitions)
    root.mkdir(parents=True, exist_ok=True)
    with mapped_briefly(data.x_train) as x, mapped_briefly(data.y_train) as y:
        for pid in missing:
            idx = indices[pid]
            _write_atomically(partition_file(cfg, pid, root), x[idx], y[idx])


def _write_atomically(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, x=x, y=y)
    os.replace(tmp, path)


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
