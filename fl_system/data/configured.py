"""The experiment's dataset and its partitions, derived from the config alone (dataset,
scheme, seed), so every process of a run gets the same ones; cached per process."""

from __future__ import annotations

import functools
import json

import numpy as np
from omegaconf import DictConfig, OmegaConf

from fl_system.data import DatasetArrays
from fl_system.data.dataset_cache import cached_arrays
from fl_system.settings.config_nodes import build


@functools.lru_cache(maxsize=4)
def _dataset(source_json: str) -> DatasetArrays:
    return build(OmegaConf.create(json.loads(source_json))).load()


def load_dataset(cfg: DictConfig) -> DatasetArrays:
    """The experiment's dataset (cached per process: clients in simulation share it)."""
    source = OmegaConf.to_container(cfg.dataset.source, resolve=True)
    return _dataset(json.dumps(source, sort_keys=True))


@functools.lru_cache(maxsize=4)
def _partitions(key: str) -> tuple[np.ndarray, ...]:
    spec = json.loads(key)
    source = build(OmegaConf.create(spec["source"]))

    def split() -> dict[str, np.ndarray]:
        """Every partition's indices in one array (10,000 partitions are one file, not
        10,000), with the partitions' sizes."""
        data = source.load()
        partitioner = build(OmegaConf.create(spec["partition"]))
        parts = partitioner.split(
            data.y_train, spec["num_partitions"], spec["seed"], groups=data.groups
        )
        sizes = np.array([len(part) for part in parts], dtype=np.int64)
        indices = np.concatenate([np.asarray(part, dtype=np.int64) for part in parts])
        return {"indices": indices, "sizes": sizes}

    identity = source.cache_identity()
    cached = split() if identity is None else cached_arrays({**spec, "source": identity}, split)
    ends = np.cumsum(cached["sizes"])
    return tuple(np.split(cached["indices"], ends[:-1]))


def partition_indices(cfg: DictConfig, num_partitions: int) -> tuple[np.ndarray, ...]:
    """Train indices of every partition, derived from (dataset, scheme, seed) alone."""
    key = {
        "source": OmegaConf.to_container(cfg.dataset.source, resolve=True),
        "partition": OmegaConf.to_container(cfg.partition, resolve=True),
        "num_partitions": int(num_partitions),
        "seed": int(cfg.seed),
    }
    return _partitions(json.dumps(key, sort_keys=True))
