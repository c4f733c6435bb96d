"""Checks a composed config before any process starts: one clear message per problem."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from fl_system.data.corruption import KINDS
from fl_system.freeloaders import KINDS as FREELOADER_KINDS
from fl_system.malicious import KINDS as MALICIOUS_KINDS


class ConfigError(ValueError):
    """The config asks for something impossible; the message names the key."""


def _int(minimum: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _positive_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def _non_negative_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def _above_one(v: Any) -> bool:
    return _positive_number(v) and v > 1


def _probability(v: Any) -> bool:
    return _non_negative_number(v) and v <= 1


_ABSENT = object()
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "seed": (_int(0), "a non-negative integer"),
    "num_clients": (_int(1), "a positive integer"),
    "num_rounds": (_int(1), "a positive integer"),
    "eval_every": (_int(1), "a positive integer"),
    "clients_per_round": (_optional(_int(1)), "null or a positive integer"),
    "min_clients": (_optional(_int(1)), "null or a positive integer"),
    "target_accuracy": (
        _optional(lambda v: _positive_number(v) and v <= 1),
        "null or a number in (0, 1]",
    ),
    "round_timeout": (_positive_number, "a positive number of seconds"),
    "resume": (lambda v: isinstance(v, bool), "true or false"),
    "keep_client_state": (lambda v: isinstance(v, bool), "true or false"),
    "train.local_epochs": (_int(1), "a positive integer"),
    "train.local_steps": (_optional(_int(1)), "null or a positive integer"),
    "train.batch_size": (_int(1), "a positive integer"),
    "train.lr": (_positive_number, "a positive number"),
    "train.momentum": (lambda v: _non_negative_number(v) and v < 1, "a number in [0, 1)"),
    "train.weight_decay": (_non_negative_number, "a number >= 0"),
    "stragglers.incomplete": (_probability, "a probability in [0, 1]"),
    "stragglers.inactive": (_probability, "a probability in [0, 1]"),
    "compression.server_apply": (
        lambda v: v in ("recommended", "full"),
        "recommended or full",
    ),
    "client_eval.enabled": (lambda v: isinstance(v, bool), "true or false"),
    "client_eval.test_fraction": (
        lambda v: _positive_number(v) and v < 1,
        "a number in (0, 1)",
    ),
    "clients.corrupt.kind": (lambda v: v in KINDS, f"one of {', '.join(KINDS)}"),
    "clients.corrupt.shift": (_int(1), "a positive integer"),
    "clients.freeloaders.kind": (
        lambda v: v in FREELOADER_KINDS,
        f"one of {', '.join(FREELOADER_KINDS)}",
    ),
    "clients.malicious.kind": (
        lambda v: str(v) in MALICIOUS_KINDS,  # str: Hydra reads nan and inf as floats
        f"one of {', '.join(MALICIOUS_KINDS)}",
    ),
    "clients.malicious.scale": (_positive_number, "a positive number"),
    "aggregation.norm_ratio": (_optional(_above_one), "null (off) or a number above 1"),
    "aggregation.examples_ratio": (_optional(_above_one), "null (off) or a number above 1"),
    "aggregation.max_reply_ratio": (_optional(_positive_number), "null or a positive number"),
}


# The add-ons' numbers, checked where an algorithm has the add-on, enabled or not (their
# classes check them again when built; a disabled one is not built, since it may need
# settings only its enabled form uses, e.g. FedGSNR's train.local_steps).
ADDON_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "algorithm.disco.a": (_non_negative_number, "a number >= 0"),
    "algorithm.disco.b": (_non_negative_number, "a number >= 0"),
    "algorithm.gsnr.samples": (_int(1), "an integer >= 1"),
    "algorithm.gsnr.max_steps": (_optional(_int(1)), "null or an integer >= 1"),
}


def check_values(cfg: DictConfig) -> None:
    """Type and range checks of the top-level settings (and the add-ons' numbers)."""
    present = {
        k: v
        for k, v in ADDON_RULES.items()
        if OmegaConf.select(cfg, k, default=_ABSENT) is not _ABSENT
    }
    for key, (ok, expected) in {**RULES, **present}.items():
        value = OmegaConf.select(cfg, key)
        if not ok(value):
            raise ConfigError(f"{key} must be {expected}, got {value!r}")
    if cfg.clients_per_round is not None and cfg.clients_per_round > cfg.num_clients:
        raise ConfigError(
            f"clients_per_round ({cfg.clients_per_round}) exceeds num_clients ({cfg.num_clients})"
        )
    if cfg.min_clients is not None and cfg.min_clients > (cfg.clients_per_round or cfg.num_clients):
        raise ConfigError(f"min_clients ({cfg.min_clients}) exceeds the clients of a round")
    for key in ("clients.corrupt.ids", "clients.freeloaders.ids", "clients.malicious.ids"):
        _check_partition_ids(key, OmegaConf.select(cfg, key), cfg.num_clients)
    if cfg.clients.malicious.ids and cfg.compression.up.name != "none":
        raise ConfigError(
            "clients.malicious sends its tampered model as it is: use it with "
            f"compression.up=none (got compression.up={cfg.compression.up.name})"
        )
    _check_stragglers(cfg)


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
    valid = isinstance(ids, ListConfig | list) and all(_int(0)(i) and i < num_clients for i in ids)
    if not valid:
        raise ConfigError(
            f"{key} must be a list of partition ids in 0..{num_clients - 1}, "
            f"got {OmegaConf.to_container(ids) if isinstance(ids, ListConfig) else ids!r}"
        )
