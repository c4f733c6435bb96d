"""Where a node's model and data come from: the run's config, or one's own Flower app.

fl_system's ClientApp builds the model and reads the node's data from the experiment it
learns at the handshake. A Flower app of one's own gives its own functions instead
(`client_app.make_client_app(load_data=..., build_model=...)`): our client rules then train
the user's model on the records the user's code loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from client_app.local_data import NodeIdentity, Records, local_test_data, local_training_data
from fl_system.data.files import DataError
from fl_system.learning.app_supplied import data_from_app
from fl_system.learning.own_model import build_model

Labelled = tuple[Records, np.ndarray]
# load_data(partition_id, num_partitions) -> (train, test): each (x, y), a Dataset or a loader
LoadData = Callable[[int, int], tuple[Any, Any]]


@dataclass(frozen=True)
class Sources:
    """How a node builds the model and reads its training and test records."""

    model: Callable[[DictConfig], nn.Module]
    # read the node's data at the handshake: one's own loader's errors then stop the run
    # before round 1 (the server stops when every node's ClientApp raised)
    load_at_handshake: bool
    training: Callable[..., Labelled]  # (cfg, node, *, normalise=True): normalise=False reads
    # a node's own files as they are (the handshake, before federated moments are known)
    test: Callable[[DictConfig, NodeIdentity], Labelled]


def _configured_training(
    cfg: DictConfig, node: NodeIdentity, *, normalise: bool = True
) -> Labelled:
    _refuse_app_data(cfg)
    return local_training_data(cfg, node, normalise=normalise)


def _configured_test(cfg: DictConfig, node: NodeIdentity) -> Labelled:
    _refuse_app_data(cfg)
    return local_test_data(cfg, node)


def _refuse_app_data(cfg: DictConfig) -> None:
    if data_from_app(cfg):
        raise DataError(
            "dataset=app: this node's ClientApp loads no data of its own; build it with "
            "client_app.make_client_app(load_data=...)"
        )


CONFIGURED = Sources(build_model, False, _configured_training, _configured_test)


def own_sources(
    load_data: LoadData | None = None, build: Callable[[], nn.Module] | None = None
) -> Sources:
    """The sources of a Flower app of one's own: its `load_data` and `build_model`, each in
    place of the config's when given (plain functions and partials: Flower's simulation
    pickles the ClientApp into its workers)."""
    return Sources(
        build_model if build is None else functools.partial(_own_model, build),
        load_data is not None,
        _configured_training if load_data is None else functools.partial(_own_part, load_data, 0),
        _configured_test if load_data is None else functools.partial(_own_part, load_data, 1),
    )


def _own_model(build: Callable[[], nn.Module], cfg: DictConfig) -> nn.Module:
    built = build()
    if not isinstance(built, nn.Module):
        raise TypeError(f"build_model returned {type(built).__name__}, not a torch.nn.Module")
    return built


def _own_part(
    load_data: LoadData, index: int, cfg: DictConfig, node: NodeIdentity, **_: object
) -> Labelled:
    """Part `index` (0 train, 1 test) of what `load_data` gives this node."""
    return _loaded(load_data, node.partition_id, node.num_partitions)[index]


@functools.lru_cache(maxsize=2)  # a simulated node's process serves many messages
def _loaded(load_data: LoadData, partition_id: int, num_partitions: int) -> tuple[Labelled, ...]:
    return _as_parts(load_data(partition_id, num_partitions))


def _as_parts(loaded: object) -> tuple[Labelled, Labelled]:
    """load_data's (train, test) as (x, y) arrays; a missing test part is empty."""
    if not isinstance(loaded, tuple | list) or len(loaded) != 2:
        raise DataError(f"load_data must return (train, test), got {type(loaded).__name__}")
    train = as_labelled(loaded[0], "train")
    if loaded[1] is None:
        return train, (train[0][:0], train[1][:0])
    return train, as_labelled(loaded[1], "test")


def as_labelled(part: object, name: str) -> Labelled:
    """One part as (float32 records, int64 labels): an (x, y) pair of arrays or tensors, a
    Dataset of (x, y) items, or a loader of (x, y) batches."""
    if isinstance(part, tuple | list) and len(part) == 2 and not _is_pair(part[0]):
        x, y = (_array(v) for v in part)
    elif isinstance(part, torch.utils.data.DataLoader):
        x, y = _stacked(part, name, batched=True)
    elif isinstance(part, torch.utils.data.Dataset):
        x, y = _stacked((part[i] for i in range(len(part))), name, batched=False)  # type: ignore[arg-type]
    else:
        raise DataError(
            f"load_data's {name} part must be (x, y) arrays or tensors, a torch Dataset or a "
            f"DataLoader of (x, y), got {type(part).__name__}"
        )
    if len(x) != len(y):
        raise DataError(f"load_data's {name} part has {len(x)} records and {len(y)} labels")
    return x.astype(np.float32, copy=False), y.astype(np.int64, copy=False)


def _is_pair(value: object) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2


def _array(value: object) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _stacked(items: Iterable[object], name: str, *, batched: bool) -> tuple[np.ndarray, ...]:
    xs, ys = [], []
    for item in items:
        if not _is_pair(item):
            raise DataError(
                f"load_data's {name} part yields {type(item).__name__}, not (x, y): map "
                "each record to a pair (a dict batch: (batch['img'], batch['label']))"
            )
        x, y = (_array(v) for v in item)  # type: ignore[union-attr]
        xs.append(x if batched else x[None])
        ys.append(np.atleast_1d(y))
    if not xs:
        raise DataError(f"load_data's {name} part is empty")
    return np.concatenate(xs), np.concatenate(ys)
