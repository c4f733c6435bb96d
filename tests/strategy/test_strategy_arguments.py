"""Every strategy class refuses, at construction and in one line, a misspelt keyword (naming
the closest argument) and a value out of its range (as fl-run refuses the same setting)."""

from __future__ import annotations

from typing import Any

import pytest

import server_app.strategies as strategies
from fl_system.config.compose import compose_experiment
from fl_system.settings.value_checks import ConfigError

# class -> (a misspelt keyword, the argument it is close to), (an invalid value, its setting)
CASES: dict[str, tuple[tuple[str, str], tuple[dict[str, Any], str]]] = {
    "Efl": (
        ("fisher_sample", "fisher_samples"),
        ({"fisher_mode": "exact"}, "algorithm.fisher_mode"),
    ),
    "FedAcg": (("bet", "beta"), ({"lam": 1.0}, "algorithm.lam")),
    "FedAdagrad": (("etta", "eta"), ({"tau": 0}, "algorithm.tau")),
    "FedAdam": (("beta1", "beta_1"), ({"beta_2": 1.5}, "algorithm.beta_2")),
    "FedAsync": (("alfa", "alpha"), ({"alpha": 0}, "algorithm.alpha")),
    "FedAvg": (("num_client", "num_clients"), ({"num_clients": 0}, "num_clients")),
    "FedBuff": (("etaa", "eta"), ({"eta": -1.0}, "algorithm.eta")),
    "FedCat": (("epsilon", "eps"), ({"eps": 1.5}, "algorithm.eps")),
    "FedDisco": (("metrics", "metric"), ({"metric": "hamming"}, "algorithm.disco.metric")),
    "FedDyn": (("alpah", "alpha"), ({"alpha": 0}, "algorithm.alpha")),
    "FedGsnr": (("sample", "samples"), ({"samples": 0}, "algorithm.gsnr.samples")),
    "FedNova": (("seeds", "seed"), ({"seed": -1}, "seed")),
    "FedProx": (("muu", "mu"), ({"mu": -1}, "algorithm.mu")),
    "FedYogi": (("tau_", "tau"), ({"eta": "fast"}, "algorithm.eta")),
    "FoolsGold": (("fraction_trian", "fraction_train"), ({"train": {"lr": -0.1}}, "train.lr")),
    "Moon": (("temperatur", "temperature"), ({"temperature": 0}, "algorithm.temperature")),
    "Scaffold": (("num_client", "num_clients"), ({"train": {"batch_size": 0}}, "train.batch_size")),
    "Stem": (("aa", "a"), ({"a": 2}, "algorithm.a")),
    "Taco": (("kapa", "kappa"), ({"kappa": 0}, "algorithm.kappa")),
}


# what a strategy needs besides its defaults, as arguments and as fl-run's overrides
NEEDS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "FedDisco": ({"num_classes": 10}, ["dataset.num_classes=10"]),
    "FedGsnr": ({"train": {"local_steps": 5}}, ["train.local_steps=5"]),
    "Taco": ({"train": {"local_steps": 5}}, ["train.local_steps=5"]),
}


def test_every_strategy_class_has_its_case() -> None:
    assert sorted(CASES) == sorted(strategies.__all__)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_misspelt_keyword_is_refused_with_the_closest_argument(name: str) -> None:
    (typo, meant), _ = CASES[name]
    with pytest.raises(TypeError) as refused:
        getattr(strategies, name)(**{typo: 1})
    message = str(refused.value)
    assert message == (
        f"{name}() got an unexpected keyword argument {typo!r}; did you mean {meant!r}?"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_invalid_value_is_refused_at_construction_as_fl_run_refuses_it(name: str) -> None:
    _, (given, key) = CASES[name]
    needed, needed_overrides = NEEDS.get(name, ({}, []))
    with pytest.raises(ConfigError) as refused:
        getattr(strategies, name)(**needed, **given)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{key} must be ")
    algorithm = getattr(strategies, name)(**needed).experiment.algorithm.name
    with pytest.raises(ConfigError) as by_fl_run:  # fl-run's check of the same setting
        compose_experiment([f"algorithm={algorithm}", *needed_overrides, *_overrides(key, given)])
    assert str(by_fl_run.value) == message


def test_an_unknown_keyword_without_a_close_one_lists_the_arguments() -> None:
    with pytest.raises(TypeError, match=r"'foo'; it takes addons, experiment, .*, train$"):
        strategies.Scaffold(foo=1)


def _overrides(key: str, given: dict[str, Any]) -> list[str]:
    """The fl-run overrides that set `key` to the value `given` holds for it."""
    value = next(iter(given.values()))
    if isinstance(value, dict):
        value = next(iter(value.values()))
    return [f"{key}={value!r}" if isinstance(value, str) else f"{key}={value}"]
