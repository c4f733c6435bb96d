"""Builds an experiment's parts (data, partition, model, algorithm) from the resolved config.

Server, client and CLI all go through these functions, so every process derives the same
dataset split, the same partition and the same initial model from (config, seed).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, MetricRecord
from omegaconf import DictConfig, OmegaConf

from fl_system.addons import mounted
from fl_system.data.cache_root import default_cache_root
from fl_system.data.configured import load_dataset
from fl_system.data.node_data import Task, node_held, normalised, read_node_data
from fl_system.learning import score
from fl_system.learning.codecs import Dense
from fl_system.learning.compression import Compression
from fl_system.learning.devices import resolve_device
from fl_system.learning.evaluation import evaluate
from fl_system.learning.own_model import build_model
from fl_system.learning.robust import WeightedMean
from fl_system.settings.config_nodes import build, config_from_json, config_to_json
from fl_system.settings.value_checks import ConfigError

# Keys that may differ between a checkpointed run and its resumption: they do not change
# what is being trained, so a resumed run is the same experiment.
RESUMABLE_CHANGES = frozenset(
    {
        "num_rounds",
        "resume",
        "checkpoint",
        "keep_client_state",
        "target_accuracy",
        "eval_every",
        "round_timeout",
        "runtime",
        "tracking",
        "server",
        "run_dir",
    }
)


def enabled_addons(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """(name, node) of every enabled add-on (Disco weighting, the GSNR step schedule), in
    config order."""
    return [(name, node) for name, node in mounted(cfg.algorithm) if node.enabled]


def build_strategy(cfg: DictConfig) -> Any:
    """The algorithm's server half, bound to the experiment: it builds the enabled add-ons'
    server halves and the aggregation.* guards (robust rule, screening ratios) from it."""
    return build(cfg.algorithm.strategy, label=cfg.algorithm.name, experiment=config_to_json(cfg))


def build_server_addons(cfg: DictConfig) -> list[Any]:
    """The enabled add-ons' server halves."""
    return [build(node.server, label=f"algorithm.{key}") for key, node in enabled_addons(cfg)]


def build_aggregation(
    cfg: DictConfig, *, rule_of_its_own: bool
) -> tuple[WeightedMean, float | None, float | None]:
    """aggregation.*: the robust rule and the norm and example-count screening ratios.

    A robust rule other than the mean is refused for strategies that combine client models
    by a rule of their own (`rule_of_its_own`)."""
    robust = build(cfg.aggregation.robust, label="aggregation.robust")
    if not isinstance(robust, WeightedMean) and rule_of_its_own:
        raise ConfigError(
            f"aggregation.robust={robust.name} does not apply to algorithm={cfg.algorithm.name}, "
            "which combines client models by a rule of its own; use aggregation.robust=mean"
        )
    return robust, cfg.aggregation.norm_ratio, cfg.aggregation.examples_ratio


def build_client_addons(cfg: DictConfig) -> list[Any]:
    """The enabled add-ons' client halves."""
    return [build(node.client, label=f"algorithm.{key}") for key, node in enabled_addons(cfg)]


def build_compression(cfg: DictConfig, direction: str = "up") -> Compression | None:
    """`compression.<direction>`: its codec with error feedback, or None when models travel
    as they are (the `none` codec), so that uncompressed runs take no extra step."""
    node = OmegaConf.to_container(cfg.compression[direction], resolve=True)
    assert isinstance(node, dict)
    feedback = node.pop("error_feedback", False)
    if not isinstance(feedback, bool):
        raise ConfigError(f"compression.{direction}.error_feedback must be true or false")
    codec = build(OmegaConf.create(node), label=f"compression.{direction}")
    return None if isinstance(codec, Dense) else Compression(codec, feedback)


# a composed config, as a dict or JSON, or the overrides that compose it
Experiment = DictConfig | Mapping[str, Any] | str | Sequence[str]


def as_experiment(value: Experiment) -> DictConfig:
    """A composed experiment config from any of its forms (read-only): a composed config, its
    JSON, a mapping, or a list of overrides (`["algorithm=taco", "num_clients=10"]`)."""
    if isinstance(value, str):
        return config_from_json(value)
    if isinstance(value, DictConfig):
        return value
    if isinstance(value, Sequence):
        from fl_system.config.compose import compose_experiment  # compose reads conf/ through Hydra

        return compose_experiment([str(v) for v in value])
    return config_from_json(json.dumps(dict(value), sort_keys=True))


def central_test_set(cfg: DictConfig) -> tuple[np.ndarray, np.ndarray] | None:
    """The records the server scores the global model on (None: evaluation=federated).

    A public dataset's test split; for data the nodes hold, `evaluation.central.data` on the
    server machine (its test part, else all of it), read for the task as a node reads."""
    mode = score.mode(cfg)
    if mode == "federated":
        return None
    if not node_held(cfg):
        data = load_dataset(cfg)
        return data.x_test, data.y_test
    path = OmegaConf.select(cfg, "evaluation.central.data")
    if not path:
        raise ConfigError(
            f"evaluation={mode} needs test data on the server for dataset={cfg.dataset.name} "
            "(the nodes hold the data): give evaluation.central.data=PATH, or use "
            "evaluation=federated (every node scores the model on its own test split)"
        )
    task = Task.from_config(cfg)
    held = read_node_data(str(path), task, cache_root=default_cache_root())
    part = held.test if held.test is not None else held.train
    return normalised(part.x, task), part.y


def central_evaluation(cfg: DictConfig) -> Callable[[int, ArrayRecord], MetricRecord]:
    """An `evaluate_fn` for Flower's `Strategy.start`: the global model's accuracy and loss on
    the experiment's test split, on the server (fl_system's driver does the same each round)."""
    test = central_test_set(cfg)
    if test is None:
        raise ConfigError("evaluation=federated has no central evaluation to give Flower's loop")
    model = build_model(cfg)
    device = resolve_device(cfg.server.device)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        accuracy, loss = evaluate(model, *test, device=device)
        return MetricRecord({"test_accuracy": accuracy, "test_loss": loss})

    return evaluate_fn
