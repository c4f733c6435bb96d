"""Every numeric setting of every shipped group option is checked before anything starts: set
to -1, each one makes preflight refuse the run (add-ons' settings too, enabled or not)."""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.cli import CONF_DIR
from fl_system.config.overrides import options
from fl_system.config.preflight import preflight
from fl_system.records.run_dir import RunPaths

BASE = {"dataset": "digits", "model": "mlp", "partition": "iid"}
NEEDS = {  # what an option needs besides BASE to compose into a valid run
    ("dataset", "mnist5k"): {"model": "cnn"},
    ("dataset", "synthetic"): {"partition": "natural"},
    ("partition", "natural"): {"dataset": "synthetic"},
    ("partition", "niid2"): {"num_clients": 6},
    ("algorithm", "fedgsnr"): {"train.local_steps": 5},
    ("algorithm", "taco"): {"train.local_steps": 5},
    ("algorithm", "fedbuff"): {"system": "profiles", "runtime": "simulation"},
    ("algorithm", "fedasync"): {"system": "profiles", "runtime": "simulation"},
    ("model", "cnn"): {"dataset": "mnist5k"},
    ("model", "resnet18_gn"): {"dataset": "mnist5k"},
    ("model", "vgg11"): {"dataset": "mnist5k"},
    ("model", "custom"): {
        "model._target_": "fl_system.learning.models.MLP"
    },  # any importable module
    # data the nodes hold: the task names its classes and shape; the nodes evaluate
    **{
        ("dataset", kind): {"dataset.classes": "[a,b]", "evaluation": "federated", **extra}
        for kind, extra in (
            ("images", {}),
            ("hf", {}),
            ("table", {"dataset.features": "{age:float}"}),
            ("npz", {"dataset.input_shape": "[4]"}),
        )
    },
}
ON_DISK = ("mnist", "fmnist", "cifar10", "cifar100", "trace")  # need files the tests lack
# supplied by a Flower app of one's own, which fl-run refuses (tests/unit/test_app_supplied.py)
FROM_APP = ("app",)


def _cfg(overrides: dict) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=[f"{k}={v}" for k, v in overrides.items()])
    with open_dict(cfg):
        cfg.run_id = "walk"
    return cfg


def _numeric_settings(node: DictConfig, prefix: str) -> Iterator[str]:
    """Keys of the numbers a user may set (interpolations are wiring, not settings)."""
    for key in node:
        child = node._get_node(key)
        if OmegaConf.is_dict(child):
            yield from _numeric_settings(child, f"{prefix}.{key}")
        elif not OmegaConf.is_missing(node, key) and not OmegaConf.is_interpolation(node, key):
            value = child._value()
            if isinstance(value, int | float) and not isinstance(value, bool):
                yield f"{prefix}.{key}"


def _overrides(group: str, option: str) -> dict:
    return {**BASE, group: option, **NEEDS.get((group, option), {})}


@functools.cache
def _composed(group: str, option: str) -> DictConfig:
    """The run of `option` as Hydra composes it (once per process: ~0.3 s each); a copy is
    what each check gets (preflight fills in the config it checks)."""
    return _cfg(_overrides(group, option))


def _keys(group: str, option: str) -> tuple[str, ...]:
    """The numeric settings of `option`."""
    path = group.split("@")[-1]  # a mounted group's settings live at its package
    return tuple(_numeric_settings(OmegaConf.select(_composed(group, option), path), path))


def _cases() -> Iterator[tuple[str, str, str]]:
    for group, option in _walked():
        for key in _keys(group, option):
            yield group, option, key


def _walked() -> list[tuple[str, str]]:
    groups = {g: g for g in ("algorithm", "dataset", "partition", "model")}
    groups.update({"robust@aggregation.robust": "robust", "privacy": "privacy", "system": "system"})
    return [
        (group, option)
        for group, folder in groups.items()
        for option in options(CONF_DIR, folder)
        if option not in ON_DISK + FROM_APP
    ]


def _preflight(cfg: DictConfig, run_dir: Path) -> None:
    logging.disable(logging.WARNING)
    try:
        preflight(copy.deepcopy(cfg), RunPaths(run_dir))
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize(("group", "option"), _walked())
def test_every_option_passes_with_its_shipped_values(
    group: str, option: str, tmp_path: Path
) -> None:
    """The base of the walk below: nothing else in the config is what fails."""
    _preflight(_composed(group, option), tmp_path / "run")


@pytest.mark.parametrize(("group", "option"), _walked())
def test_minus_one_is_refused_before_anything_starts(
    group: str, option: str, tmp_path: Path
) -> None:
    """Each numeric setting of the option in turn, set to -1 as an override sets it (the
    option's keys are found by composing it, so they are not listed at collection, which
    every worker does)."""
    accepted = []
    for key in _keys(group, option):
        cfg = copy.deepcopy(_composed(group, option))
        OmegaConf.update(cfg, key, -1)
        try:
            _preflight(cfg, tmp_path)
        except (ValueError, RuntimeError):
            continue
        accepted.append(key)
    assert accepted == [], f"{group}={option}: -1 accepted for {accepted}"


def test_the_walk_covers_the_shipped_options() -> None:
    cases = list(_cases())
    assert {
        ("algorithm", "fedprox", "algorithm.mu"),
        ("algorithm", "fedcat", "algorithm.eps"),
        ("partition", "dirichlet", "partition.min_size"),
        ("algorithm", "fedavg", "algorithm.disco.a"),
        ("robust@aggregation.robust", "trimmed_mean", "aggregation.robust.trim"),
        ("privacy", "central_fixed", "privacy.noise_multiplier"),
        ("privacy", "local", "privacy.epsilon"),
        ("system", "mobile", "system.uplink_mbps.median"),
        ("system", "profiles", "system.availability.mean_session"),
    } <= set(cases)
    assert ("dataset", "synthetic", "dataset.source.alpha") in cases
    assert len(cases) > 60
