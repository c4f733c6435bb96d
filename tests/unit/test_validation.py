from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from fl_system.cli import CONF_DIR
from fl_system.config.experiment import build_strategy
from fl_system.config.validation import check_values
from fl_system.learning.robust import CoordinateMedian
from fl_system.settings.value_checks import ConfigError


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=list(overrides))


def test_defaults_are_valid() -> None:
    check_values(_cfg())


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num_rounds=-1", "num_rounds must be a positive integer, got -1"),
        ("num_clients=0", "num_clients must be a positive integer, got 0"),
        ("train.lr=0", "train.lr must be a positive number, got 0"),
        ("target_accuracy=1.5", "target_accuracy must be null or a number in (0, 1]"),
        ("clients_per_round=9", "clients_per_round (9) exceeds num_clients (4)"),
        ("resume=maybe", "resume must be true or false"),
        ("train.momentum=1", "train.momentum must be a number in [0, 1), got 1"),
        (
            "clients.corrupt.ids=[0,4]",
            "clients.corrupt.ids must be a list of partition ids in 0..3, got [0, 4]",
        ),
        ("clients.corrupt.ids=2", "clients.corrupt.ids must be a list of partition ids in 0..3"),
        (
            "clients.corrupt.kind=flip",
            "clients.corrupt.kind must be one of label_shift, noise, got 'flip'",
        ),
        ("clients.corrupt.shift=0", "clients.corrupt.shift must be a positive integer, got 0"),
        (
            "clients.freeloaders.ids=[-1]",
            "clients.freeloaders.ids must be a list of partition ids in 0..3, got [-1]",
        ),
        (
            "clients.freeloaders.kind=lazy",
            "clients.freeloaders.kind must be one of global, echo, noise, got 'lazy'",
        ),
        (
            "clients.malicious.ids=[4]",
            "clients.malicious.ids must be a list of partition ids in 0..3, got [4]",
        ),
        (
            "clients.malicious.kind=evil",
            "clients.malicious.kind must be one of nan, inf, shape, dtype, missing, huge, "
            "scaled, oversized, got 'evil'",
        ),
        ("clients.malicious.scale=0", "clients.malicious.scale must be a positive number, got 0"),
        (
            "aggregation.norm_ratio=1",
            "aggregation.norm_ratio must be null (off) or a number above 1, got 1",
        ),
        (
            "aggregation.examples_ratio=-1",
            "aggregation.examples_ratio must be null (off) or a number above 1, got -1",
        ),
        (
            "stragglers.incomplete=1.5",
            "stragglers.incomplete must be a probability in [0, 1], got 1.5",
        ),
        ("stragglers.inactive=-0.1", "stragglers.inactive must be a probability in [0, 1]"),
        ("stragglers.inactive=0.1", "stragglers need train.local_steps (E, the steps of a"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_values(_cfg(override))
    assert message in str(err.value)


def test_stragglers_and_gsnr_both_set_local_steps() -> None:
    cfg = _cfg("algorithm=fedgsnr", "train.local_steps=5", "stragglers.incomplete=0.5")
    with pytest.raises(ConfigError, match=r"stragglers cannot be combined with algorithm\.gsnr"):
        check_values(cfg)
    check_values(_cfg("algorithm=efl", "train.local_steps=5", "stragglers.incomplete=0.5"))


def test_malicious_clients_send_uncompressed() -> None:
    cfg = _cfg("clients.malicious.ids=[1]", "codec@compression.up=st", "clients.malicious.kind=nan")
    with pytest.raises(ConfigError, match=r"use it with compression\.up=none \(got .*=st\)"):
        check_values(cfg)
    check_values(_cfg("clients.malicious.ids=[1]", "clients.malicious.kind=nan"))


def test_a_robust_rule_needs_a_strategy_that_averages() -> None:
    cfg = _cfg("algorithm=fednova", "robust@aggregation.robust=median")
    with pytest.raises(ConfigError, match=r"aggregation\.robust=median does not apply to "):
        build_strategy(cfg)
    assert isinstance(
        build_strategy(_cfg("robust@aggregation.robust=median")).robust, CoordinateMedian
    )
