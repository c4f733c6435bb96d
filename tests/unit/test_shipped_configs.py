"""Every shipped config composes and builds (torchtune's habit: no config rots unnoticed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.serverapp.strategy import Strategy
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import DictConfig

from fl_system.cli import CONF_DIR
from fl_system.config.experiment import (
    build_client_addons,
    build_compression,
    build_strategy,
)
from fl_system.config.validation import check_values
from fl_system.data.node_data import KINDS, Task
from fl_system.data.partitions import Partitioner
from fl_system.learning.own_model import build_model
from fl_system.settings.config_nodes import build
from server_app.federated.strategy import FederatedStrategy
from tests.algorithms import ASYNCHRONOUS


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def _cfg(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("name", _options("algorithm"))
def test_algorithms_build_both_halves(name: str) -> None:
    clock = ["system=profiles", "runtime=simulation"] if name in ASYNCHRONOUS else []
    cfg = _cfg(f"algorithm={name}", "train.local_steps=5", *clock)
    assert cfg.algorithm.name == name
    target = get_class(cfg.algorithm.strategy._target_)
    assert issubclass(target, Strategy)  # Flower's: usable by any Flower app, wrappable
    strategy = build_strategy(cfg)
    assert isinstance(strategy, FederatedStrategy)
    rule = build(cfg.algorithm.local_rule)
    assert callable(rule.loss_term) and callable(rule.finish)
    assert len(strategy.addons) == len(build_client_addons(cfg))


# model=app and dataset=app: a Flower app of one's own supplies them (test_app_supplied.py)
@pytest.mark.parametrize("name", [m for m in _options("model") if m != "app"])
def test_models_build_for_their_inputs(name: str) -> None:
    dataset = "synthetic" if name in ("mlp", "custom") else "cifar10"
    own = ["model._target_=fl_system.learning.models.MLP"] if name == "custom" else []  # any module
    cfg = _cfg(f"model={name}", f"dataset={dataset}", *own)
    model = build_model(cfg)
    x = np.zeros((2, *cfg.dataset.input_shape), dtype=np.float32)
    assert model(torch.from_numpy(x)).shape == (2, cfg.dataset.num_classes)


@pytest.mark.parametrize("name", [d for d in _options("dataset") if d != "app"])
def test_datasets_build_and_describe_their_data(name: str) -> None:
    if name in KINDS:  # data the nodes hold: the task gives the model its sizes
        extra = {"table": "dataset.features={a:float,b:[x,y]}", "npz": "dataset.input_shape=[3]"}
        cfg = _cfg(f"dataset={name}", "dataset.classes=[p,q,r]", extra.get(name, "seed=0"))
        task = Task.from_config(cfg)
        assert list(task.input_shape) == list(cfg.dataset.input_shape)
        assert cfg.dataset.num_classes == 3
        return
    cfg = _cfg(f"dataset={name}")
    source = build(cfg.dataset.source)
    assert callable(source.load)
    if name in {"digits", "synthetic"}:  # bundled or generated: check the declared shape
        data = source.load()
        assert list(data.x_train.shape[1:]) == list(cfg.dataset.input_shape)
        assert data.num_classes == cfg.dataset.num_classes


@pytest.mark.parametrize("name", _options("partition"))
def test_partitions_split(name: str) -> None:
    cfg = _cfg(f"partition={name}")
    partitioner = build(cfg.partition)
    assert isinstance(partitioner, Partitioner)
    labels = np.repeat(np.arange(10), 60)
    groups = np.arange(600) % 6
    parts = partitioner.split(labels, 6, seed=0, groups=groups)
    assert len(parts) == 6 and sum(len(p) for p in parts) <= 600


@pytest.mark.parametrize("name", _options("codec"))
def test_codecs_build_and_round_trip(name: str) -> None:
    cfg = _cfg(f"codec@compression.up={name}")
    compression = build_compression(cfg)
    if name == "none":
        assert compression is None
        return
    update = [np.linspace(-1, 1, 300, dtype=np.float32).reshape(3, 100)]
    blob, decoded, _ = compression.encode(update, None, np.random.default_rng(0))
    assert compression.decode(blob, [(3, 100)])[0].tolist() == decoded[0].tolist()


@pytest.mark.parametrize("name", _options("runtime"))
def test_runtimes_build(name: str) -> None:
    extra = ["runtime.address=127.0.0.1:9092"] if name == "remote" else []
    cfg = _cfg(f"runtime={name}", *extra)
    check_values(cfg)
    assert callable(build(cfg.runtime).run)


@pytest.mark.parametrize("name", _options("experiment"))
def test_experiment_presets_compose_with_any_dataset(name: str) -> None:
    for dataset in ("digits", "mnist5k"):
        cfg = _cfg(f"experiment={name}", f"dataset={dataset}", "model=mlp")
        check_values(cfg)
        parts = build(cfg.partition).split(
            np.repeat(np.arange(10), 120), cfg.num_clients, seed=cfg.seed
        )
        assert len(parts) == cfg.num_clients
