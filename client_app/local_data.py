"""Who this node is, and the training data it holds."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Context
from omegaconf import DictConfig, OmegaConf

from fl_system.data.cache_root import default_cache_root
from fl_system.data.corruption import corrupt
from fl_system.data.files import DataError
from fl_system.data.local_split import stratified_split
from fl_system.data.node_data import (
    NodeData,
    NodeReport,
    Task,
    node_held,
    normalised,
    read_node_data,
)
from fl_system.data.node_data.statistics import node_moments
from fl_system.data.node_data.streamed import Streamed, streams
from fl_system.data.node_dir import load_node_dir
from fl_system.data.partition_cache import cached_partition
from fl_system.learning import score
from fl_system.learning.seeding import derive_seed
from fl_system.runtime.state_root import default_state_root

Records = np.ndarray | Streamed  # a node's records: in memory, or streamed from its cache
_SPLIT_SEED = 0x5B1  # separates the local train/test split from other per-partition draws


@dataclass(frozen=True)
class NodeIdentity:
    """The only things a client knows by itself (its node config)."""

    partition_id: int
    num_partitions: int
    data_dir: str | None = None  # its own data (node config `data`, or `data-dir`)
    data_kind: str | None = None  # what that data is (`data-kind`), else detected
    name: str | None = None  # how the server names it in what it reports (`name`)
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
            data_dir=str(cfg.get("data") or cfg.get("data-dir") or "") or None,
            data_kind=str(cfg["data-kind"]) if cfg.get("data-kind") else None,
            name=str(cfg["name"]) if cfg.get("name") else None,
            device=str(cfg.get("device", "auto")),
            cache_dir=str(cfg["cache-dir"]) if cfg.get("cache-dir") else None,
            state_dir=str(cfg["state-dir"]) if cfg.get("state-dir") else None,
        )

    @property
    def label(self) -> str:
        """How messages name this node: its name, else its partition id."""
        return self.name or str(self.partition_id)

    def state_root(self) -> Path:
        return Path(self.state_dir) if self.state_dir else default_state_root()

    def cache_root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else default_cache_root()


def local_training_data(
    cfg: DictConfig, node: NodeIdentity, *, normalise: bool = True
) -> tuple[Records, np.ndarray]:
    """The node's own data if it holds some, else its (cached) partition of the dataset,
    less its local test split when it holds one out; corrupted when the run names this
    partition in `clients.corrupt.ids`. `normalise=False`: a node's own records as read
    (what the handshake's hooks count, before federated normalisation is known). A node's
    own records too large to hold normalised come as a `Streamed` view of its mapped cache."""
    if node_held(cfg):
        base, rows, y = _training_rows(cfg, node)
        x = _view(base, rows, _normaliser(cfg) if normalise else np.asarray)
    else:
        x, y = _own_or_partition(cfg, node)
        if holds_out(cfg):
            train, _ = _local_split(cfg, node, y)
            x, y = x[train], y[train]
    corrupted = cfg.clients.corrupt
    if node.partition_id in corrupted.ids:
        if isinstance(x, Streamed) and corrupted.kind != "label_shift":
            raise DataError(
                f"clients.corrupt.kind={corrupted.kind} rewrites records in memory; node "
                f"{node.label} streams its {len(x)} records from its cache"
            )
        return corrupt(
            x,
            y,
            kind=str(corrupted.kind),
            shift=int(corrupted.shift),
            num_classes=int(cfg.dataset.num_classes),
            seed=derive_seed(int(cfg.seed), node.partition_id),
        )
    return x, y


def raw_training_data(cfg: DictConfig, node: NodeIdentity) -> tuple[Records, np.ndarray]:
    """The records a node holding its own data trains on, as read (not normalised)."""
    base, rows, y = _training_rows(cfg, node)
    return _view(base, rows, np.asarray), y


def _training_rows(
    cfg: DictConfig, node: NodeIdentity
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The node's training records as held (mapped from its cache), which of them it trains
    on (None: all; less its held-out share), and their labels."""
    held = held_data(cfg, node)
    x, y = held.train.x, held.train.y
    if held.test is None and holds_out(cfg):
        train, _ = _local_split(cfg, node, y)
        return x, train, y[train]
    return x, None, y


def _view(base: np.ndarray, rows: np.ndarray | None, normalise: Callable) -> Records:
    """Rows `rows` of `base`, normalised: in memory, or past the node's limit a streamed view."""
    count = len(base) if rows is None else len(rows)
    if streams((count, *base.shape[1:])):
        return Streamed(base, normalise, rows)
    return normalise(base if rows is None else base[rows])


def _normaliser(cfg: DictConfig) -> Callable[[np.ndarray], np.ndarray]:
    return functools.partial(normalised, task=_normalising(cfg))


def _normalising(cfg: DictConfig) -> Task:
    """The run's task, whose mean and std normalise records; under normalize=federated the
    server fills them in (its statistics exchange) before any record is used."""
    task = Task.from_config(cfg)
    if task.normalize == "federated" and task.mean is None:
        raise DataError(
            "dataset.normalize=federated: this node has not received the derived statistics "
            "(the server sends them with a second handshake before round 1)"
        )
    return task


def local_test_data(cfg: DictConfig, node: NodeIdentity) -> tuple[Records, np.ndarray]:
    """The node's held-out share (`client_eval.test_fraction`, stratified by label), never
    trained on and never corrupted: what per-client and federated evaluation score models on.
    A node holding a test part of its own scores on that instead."""
    if node_held(cfg):
        held = held_data(cfg, node)
        if held.test is not None:
            return _view(held.test.x, None, _normaliser(cfg)), held.test.y
        _, test = _local_split(cfg, node, held.train.y)
        return _view(held.train.x, test, _normaliser(cfg)), held.train.y[test]
    x, y = _own_or_partition(cfg, node)
    _, test = _local_split(cfg, node, y)
    return x[test], y[test]


def holds_out(cfg: DictConfig) -> bool:
    """Whether clients keep a share of their data back for evaluation (unless they hold a
    test part): per-client evaluation, or federated evaluation."""
    per_client = bool(OmegaConf.select(cfg, "client_eval.enabled", default=False))
    return per_client or score.mode(cfg) != "central"


def held_data(cfg: DictConfig, node: NodeIdentity) -> NodeData:
    """The data this node holds, read for the run's task (dataset=images|table|hf|npz): its
    node config's path, else (one machine, simulation) `runtime.node_data[partition]`."""
    listed = OmegaConf.select(cfg, "runtime.node_data") or []
    path = node.data_dir or (listed[node.partition_id] if node.partition_id < len(listed) else None)
    if not path:
        raise DataError(
            f"node {node.label} holds no data: the run's dataset={cfg.dataset.name} is held by "
            "the nodes; start it with fl-client --data PATH (node config data=PATH)"
        )
    return _read(str(path), Task.from_config(cfg), node.data_kind, node.cache_root())


@functools.lru_cache(maxsize=2)
def _read(path: str, task: Task, kind: str | None, cache_root: Path) -> NodeData:
    """One read per process (a simulation worker serves many messages)."""
    return read_node_data(path, task, kind=kind, cache_root=cache_root)


def data_report(cfg: DictConfig, node: NodeIdentity) -> NodeReport:
    """This node's data described for the handshake; a node that cannot read it says why."""
    try:
        return held_data(cfg, node).report
    except DataError as err:
        return NodeReport(path=node.data_dir or "", error=str(err))


def training_moments(cfg: DictConfig, node: NodeIdentity) -> dict[str, np.ndarray]:
    """dataset.normalize=federated: count, sum and centred sum of squares of the records this
    node trains on, per channel or numeric feature (`node_moments`)."""
    x, _ = raw_training_data(cfg, node)
    return node_moments(x, Task.from_config(cfg))


def _local_split(cfg: DictConfig, node: NodeIdentity, y: np.ndarray):
    seed = derive_seed(int(cfg.seed), node.partition_id, _SPLIT_SEED)
    return stratified_split(y, float(cfg.client_eval.test_fraction), seed)


def _own_or_partition(cfg: DictConfig, node: NodeIdentity) -> tuple[np.ndarray, np.ndarray]:
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
    return cached_partition(cfg, node.partition_id, node.cache_root())
