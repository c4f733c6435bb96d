"""Checks a composed config before any process starts: one clear message per problem."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from fl_system import heterogeneity
from fl_system.addons import check_settings, mounted
from fl_system.config import algorithm_settings
from fl_system.data.corruption import KINDS
from fl_system.learning.app_supplied import check_app_data
from fl_system.learning.freeloaders import KINDS as FREELOADER_KINDS
from fl_system.learning.malicious import KINDS as MALICIOUS_KINDS
from fl_system.learning.staleness import KINDS as STALENESS
from fl_system.records import tracking
from fl_system.settings.value_checks import (
    ConfigError,
    Rule,
    above_one,
    integer_at_least,
    non_negative_number,
    optional,
    positive_number,
    probability,
    refusal,
)

RULES: dict[str, Rule] = {
    "seed": (integer_at_least(0), "a non-negative integer"),
    "num_clients": (integer_at_least(1), "a positive integer"),
    "num_rounds": (integer_at_least(1), "a positive integer"),
    "eval_every": (integer_at_least(1), "a positive integer"),
    "clients_per_round": (optional(integer_at_least(1)), "null or a positive integer"),
    "min_clients": (optional(integer_at_least(1)), "null or a positive integer"),
    "target_accuracy": (
        optional(lambda v: positive_number(v) and v <= 1),
        "null or a number in (0, 1]",
    ),
    "round_timeout": (positive_number, "a positive number of seconds"),
    "resume": (lambda v: isinstance(v, bool), "true or false"),
    "checkpoint.every": (integer_at_least(1), "a positive integer"),
    "keep_client_state": (lambda v: isinstance(v, bool), "true or false"),
    "train.local_epochs": (integer_at_least(1), "a positive integer"),
    "train.local_steps": (optional(integer_at_least(1)), "null or a positive integer"),
    "train.batch_size": (integer_at_least(1), "a positive integer"),
    "train.lr": (positive_number, "a positive number"),
    "train.momentum": (lambda v: non_negative_number(v) and v < 1, "a number in [0, 1)"),
    "train.weight_decay": (non_negative_number, "a number >= 0"),
    "stragglers.incomplete": (probability, "a probability in [0, 1]"),
    "stragglers.inactive": (probability, "a probability in [0, 1]"),
    "compression.server_apply": (
        lambda v: v in ("recommended", "full"),
        "recommended or full",
    ),
    "client_eval.enabled": (lambda v: isinstance(v, bool), "true or false"),
    "client_eval.test_fraction": (
        lambda v: positive_number(v) and v < 1,
        "a number in (0, 1)",
    ),
    "clients.corrupt.kind": (lambda v: v in KINDS, f"one of {', '.join(KINDS)}"),
    "clients.corrupt.shift": (integer_at_least(1), "a positive integer"),
    "clients.freeloaders.kind": (
        lambda v: v in FREELOADER_KINDS,
        f"one of {', '.join(FREELOADER_KINDS)}",
    ),
    "clients.malicious.kind": (
        lambda v: str(v) in MALICIOUS_KINDS,  # str: Hydra reads nan and inf as floats
        f"one of {', '.join(MALICIOUS_KINDS)}",
    ),
    "clients.malicious.scale": (positive_number, "a positive number"),
    "clients.slow.seconds_per_step": (non_negative_number, "a number of seconds >= 0"),
    "aggregation.norm_ratio": (optional(above_one), "null (off) or a number above 1"),
    "aggregation.examples_ratio": (optional(above_one), "null (off) or a number above 1"),
    "aggregation.max_reply_ratio": (optional(positive_number), "null or a positive number"),
    "async.concurrency": (integer_at_least(1), "a positive integer"),
    "async.buffer_size": (integer_at_least(1), "a positive integer"),
    "async.max_staleness": (optional(integer_at_least(0)), "null or an integer >= 0"),
    "async.staleness": (lambda v: v in STALENESS, f"one of {', '.join(STALENESS)}"),
    "async.a": (non_negative_number, "a number >= 0"),
    "async.b": (non_negative_number, "a number >= 0"),
}


def check_values(cfg: DictConfig) -> None:
    """Type and range checks of the top-level settings and the add-ons' own."""
    for key, rule in RULES.items():
        if problem := refusal(key, rule, OmegaConf.select(cfg, key)):
            raise ConfigError(problem)
    for key, rule in algorithm_settings.RULES.get(str(cfg.algorithm.name), {}).items():
        if problem := refusal(f"algorithm.{key}", rule, OmegaConf.select(cfg.algorithm, key)):
            raise ConfigError(problem)
    for name, node in mounted(cfg.algorithm):  # enabled or not; their halves check the same
        check_settings(name, node)
    if cfg.clients_per_round is not None and cfg.clients_per_round > cfg.num_clients:
        raise ConfigError(
            f"clients_per_round ({cfg.clients_per_round}) exceeds num_clients ({cfg.num_clients})"
        )
    if cfg.min_clients is not None and cfg.min_clients > (cfg.clients_per_round or cfg.num_clients):
        raise ConfigError(f"min_clients ({cfg.min_clients}) exceeds the clients of a round")
    played = ("corrupt", "freeloaders", "malicious", "slow")
    for key in (f"clients.{kind}.ids" for kind in played):
        _check_partition_ids(key, OmegaConf.select(cfg, key), cfg.num_clients)
    if cfg.clients.malicious.ids and cfg.compression.up.name != "none":
        raise ConfigError(
            "clients.malicious sends its tampered model as it is: use it with "
            f"compression.up=none (got compression.up={cfg.compression.up.name})"
        )
    _check_stragglers(cfg)
    check_app_data(cfg)
    heterogeneity.check(cfg)
    tracking.check(cfg)


def _check_stragglers(cfg: DictConfig) -> None:
    if cfg.stragglers.incomplete == 0 and cfg.stragglers.inactive == 0:
        return
    if cfg.train.local_steps is None:
        raise ConfigError(
            "stragglers need train.local_steps (E, the steps of a client that completes its "
            "round), e.g. train.local_steps=20"
        )
    gsnr = OmegaConf.select(cfg, "algorithm.gsnr.enabled")
    if gsnr:
        raise ConfigError(
            "stragglers cannot be combined with algorithm.gsnr.enabled=true: both set each "
            "client's local steps"
        )


def _check_partition_ids(key: str, ids: Any, num_clients: int) -> None:
    valid = isinstance(ids, ListConfig | list) and all(
        integer_at_least(0)(i) and i < num_clients for i in ids
    )
    if not valid:
        raise ConfigError(
            f"{key} must be a list of partition ids in 0..{num_clients - 1}, "
            f"got {OmegaConf.to_container(ids) if isinstance(ids, ListConfig) else ids!r}"
        )
