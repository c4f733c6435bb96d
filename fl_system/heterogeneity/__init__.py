"""Devices and networks that differ (`system=profiles|mobile|...|trace`): what the virtual
clock knows of each client, built from the config, and the checks of its settings.

The clock itself is accounting in the server (`server_app.virtual_clock`): it never sleeps and
runs the same in every runtime. `system=none` (the default) has no clock at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from fl_system.heterogeneity import traces
from fl_system.heterogeneity.availability import Availability, drawn
from fl_system.heterogeneity.clock import Profile
from fl_system.heterogeneity.profiles import ProfileMix, Spread, training_flops_per_sample
from fl_system.settings.value_checks import (
    ConfigError,
    integer_at_least,
    non_negative_number,
    optional,
    positive_number,
    refusal,
)

NONE = "none"
TRACE = "trace"


@dataclass
class SystemModel:
    """Every client's profile and sessions, and the round rules (deadline, first k)."""

    profiles: dict[int, Profile]
    batch_size: int
    local_steps: int | None  # E, the steps a deadline cuts (None: epochs, no deadline)
    deadline: float | None
    first_k: int | None
    availability: Availability | None


def enabled(cfg: DictConfig) -> bool:
    return str(OmegaConf.select(cfg, "system.name", default=NONE)) != NONE


def _spread(cfg: DictConfig, key: str) -> Spread:
    node = OmegaConf.select(cfg, key)
    return Spread(float(node.median), float(node.sigma))


def from_config(cfg: DictConfig) -> SystemModel | None:
    """The run's system model, or None under system=none."""
    if not enabled(cfg):
        return None
    system = cfg.system
    n = int(cfg.num_clients)
    latency = float(system.latency_ms) / 1e3
    if system.name == TRACE:
        profiles = traces.device_profiles(Path(system.trace), n, latency=latency)
    else:
        from fl_system.learning.own_model import build_model

        flops = training_flops_per_sample(build_model(cfg), list(cfg.dataset.input_shape))
        mix = ProfileMix(
            _spread(cfg, "system.compute"),
            _spread(cfg, "system.uplink_mbps"),
            _spread(cfg, "system.downlink_mbps"),
            float(system.latency_ms),
        )
        profiles = {p: mix.draw(int(cfg.seed), p, flops) for p in range(n)}
    return SystemModel(
        profiles=profiles,
        batch_size=int(cfg.train.batch_size),
        local_steps=cfg.train.local_steps,
        deadline=system.round_deadline,
        first_k=system.first_k,
        availability=_availability(cfg),
    )


def _availability(cfg: DictConfig) -> Availability | None:
    node = cfg.system.availability
    if node.trace is not None:
        return traces.availability(Path(node.trace), int(cfg.num_clients))
    if float(node.fraction) >= 1:
        return None
    fraction, mean_session = float(node.fraction), float(node.mean_session)
    return drawn(int(cfg.seed), int(cfg.num_clients), fraction, mean_session)


def _spread_ok(v: object) -> bool:
    return (
        isinstance(v, DictConfig)
        and positive_number(v.get("median"))
        and non_negative_number(v.get("sigma"))
    )


_RULES = {
    "system.latency_ms": (non_negative_number, "a number of milliseconds >= 0"),
    "system.round_deadline": (optional(positive_number), "null or a positive number of seconds"),
    "system.first_k": (optional(integer_at_least(1)), "null or a positive integer"),
    "system.availability.fraction": (
        lambda v: positive_number(v) and v <= 1,
        "a number in (0, 1]",
    ),
    "system.availability.mean_session": (positive_number, "a positive number of seconds"),
}
_SPREADS = {
    "system.compute": "GFLOP/s",
    "system.uplink_mbps": "Mbit/s",
    "system.downlink_mbps": "Mbit/s",
}


def check(cfg: DictConfig) -> None:
    """One ConfigError naming the first bad system setting (traces are read here too)."""
    if not enabled(cfg):
        return
    for key, rule in _RULES.items():
        if problem := refusal(key, rule, OmegaConf.select(cfg, key)):
            raise ConfigError(problem)
    if cfg.system.name != TRACE:
        for key, unit in _SPREADS.items():
            node = OmegaConf.select(cfg, key)
            if not _spread_ok(node):
                shown = OmegaConf.to_container(node) if isinstance(node, DictConfig) else node
                raise ConfigError(
                    f"{key} must be {{median: a positive number of {unit}, sigma: a number "
                    f">= 0}}, got {shown!r}"
                )
    _check_rules(cfg)
    try:
        n = int(cfg.num_clients)
        if cfg.system.name == TRACE:
            if cfg.system.trace is None:
                raise ConfigError("system=trace needs system.trace=<file> (CSV or FedScale's)")
            traces.device_profiles(Path(cfg.system.trace), n, latency=0.0)
        if cfg.system.availability.trace is not None:
            traces.availability(Path(cfg.system.availability.trace), n)
    except traces.TraceError as err:
        raise ConfigError(str(err)) from None


def _check_rules(cfg: DictConfig) -> None:
    system = cfg.system
    sampled = cfg.clients_per_round or cfg.num_clients
    if system.first_k is not None and system.first_k > sampled:
        raise ConfigError(
            f"system.first_k ({system.first_k}) exceeds the clients sampled per round "
            f"({sampled}): sample more (clients_per_round) and keep the first k"
        )
    if system.round_deadline is None:
        return
    if cfg.train.local_steps is None:
        raise ConfigError(
            "system.round_deadline needs train.local_steps (E, the steps a deadline cuts), "
            "e.g. train.local_steps=20"
        )
    if cfg.stragglers.incomplete or cfg.stragglers.inactive:
        raise ConfigError(
            "system.round_deadline decides who straggles: leave stragglers.incomplete and "
            "stragglers.inactive at 0 (the EFL budget model is for runs without a deadline)"
        )
    if OmegaConf.select(cfg, "algorithm.gsnr.enabled"):
        raise ConfigError(
            "system.round_deadline cannot be combined with algorithm.gsnr.enabled=true: both "
            "set each client's local steps"
        )
    if math.isinf(float(system.round_deadline)):
        raise ConfigError("system.round_deadline must be finite (null: no deadline)")
