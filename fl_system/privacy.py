"""Differential privacy (`privacy=...`): what composes with Flower's DP, and the privacy account.

The mechanisms are Flower's own: the server-side wrappers of a Strategy
(`DifferentialPrivacy{ServerSide,ClientSide}{Fixed,Adaptive}Clipping`) and the client mods
(`fixedclipping_mod`, `adaptiveclipping_mod`, `LocalDpMod`). Their limits, read from their
source, decide what is refused before anything starts: the mods refuse messages that carry
more than one ArrayRecord (and one ConfigRecord), server-side clipping clips every record of a
reply against the global model, and the noise is calibrated to the uniform mean of clipped
updates. So a run under privacy needs a rule whose clients start from the global model and
reply with their model alone, no compression (clipping must see the real update) and the
plain mean (`aggregation.robust=mean`).

Accounting (fixed clipping, `privacy.accounting`) uses Flower's `RdpAccountant` with the
release model Flower's wrappers support: every sampled client, no amplification by sampling,
add-or-remove-one neighbours. A rule that weighs clients other than uniformly (Disco's
weights, TACO's alpha, FoolsGold) runs unaccounted: the accountant's guarantee is for the
uniform average.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant
from omegaconf import DictConfig, OmegaConf

from fl_system.config_nodes import build
from fl_system.validation import ConfigError

FIXED = ("central_fixed", "client_fixed")  # what Flower's accountant covers
ON_CLIENTS = ("client_fixed", "client_adaptive", "local")  # mechanisms run by client mods
_STATE = "privacy/"

# privacy.<key>: (accepts, what it must be); checked wherever the chosen mode has the key
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "noise_multiplier": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "clipping_norm": (lambda v: _number(v) and v > 0, "a positive number"),
    "delta": (lambda v: _number(v) and 0 < v < 1, "a number in (0, 1)"),
    "initial_clipping_norm": (lambda v: _number(v) and v > 0, "a positive number"),
    "target_clipped_quantile": (lambda v: _number(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "clip_norm_lr": (lambda v: _number(v) and v > 0, "a positive number"),
    "clipped_count_stddev": (lambda v: v is None or (_number(v) and v >= 0), "null or >= 0"),
    "sensitivity": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "epsilon": (lambda v: _number(v) and v > 0, "a positive number"),
    "accounting": (lambda v: isinstance(v, bool), "true or false"),
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


def mode(cfg: DictConfig) -> str:
    """The run's privacy mode (`none` when the config has no privacy group)."""
    return str(OmegaConf.select(cfg, "privacy.name", default="none"))


def clients_per_round(cfg: DictConfig) -> int:
    """How many clients every round samples: what the noise is calibrated to."""
    return int(cfg.clients_per_round or cfg.num_clients)


def check_privacy(cfg: DictConfig, strategy: Any) -> None:
    """Raise ConfigError, one line naming why, if the run's privacy cannot compose."""
    name = mode(cfg)
    if name == "none":
        return
    head = f"privacy={name}"
    for key, (ok, expected) in RULES.items():
        if key in cfg.privacy and not ok(cfg.privacy[key]):
            raise ConfigError(f"privacy.{key} must be {expected}, got {cfg.privacy[key]!r}")
    for direction in ("up", "down"):
        codec = cfg.compression[direction].name
        if codec != "none":
            raise ConfigError(
                f"{head} does not compose with compression.{direction}={codec}: clipping must "
                f"see the real update, not a compressed one; use compression.{direction}=none"
            )
    robust = cfg.aggregation.robust.name
    if robust != "mean" and name != "local":  # local noise is added before aggregation
        raise ConfigError(
            f"{head} does not compose with aggregation.robust={robust}: the noise is calibrated "
            "to the mean of clipped updates; use aggregation.robust=mean"
        )
    if OmegaConf.select(cfg, "algorithm.gsnr.enabled"):
        raise ConfigError(
            f"{head} does not compose with algorithm.gsnr: its query sends gradient "
            "statistics that no DP mechanism covers"
        )
    problem = strategy.privacy_conflict(name)
    if problem is not None:
        raise ConfigError(f"{head} does not compose with algorithm={cfg.algorithm.name}: {problem}")
    if cfg.privacy.get("accounting") and name not in FIXED:
        raise ConfigError(
            f"{head}: Flower's accountant covers fixed clipping only; set privacy.accounting=false"
        )
    try:  # Flower's own checks of its settings, e.g. adaptive clipping's noise split
        build_wrapper(cfg, strategy)
        if cfg.privacy.client is not None:
            build(cfg.privacy.client, label="privacy")
    except ValueError as err:
        raise ConfigError(f"{head}: {err}") from None


def build_wrapper(cfg: DictConfig, strategy: Any) -> Any:
    """Flower's DP wrapper of `privacy.server` around `strategy` (None when there is none)."""
    if cfg.privacy.server is None:
        return None
    wrapper = build(cfg.privacy.server, label="privacy", _partial_=True)
    return wrapper(strategy=strategy, num_sampled_clients=clients_per_round(cfg))


def unaccounted_reason(cfg: DictConfig, strategy: Any) -> str | None:
    """Why a run that asks for accounting is not accounted (None: it is, or did not ask)."""
    if mode(cfg) not in FIXED or not cfg.privacy.accounting:
        return None
    if float(cfg.privacy.noise_multiplier) == 0:
        return "privacy.noise_multiplier is 0: no noise, no privacy to account"
    weighting = strategy.weighting_under_privacy()
    if weighting is not None:
        return (
            f"algorithm={cfg.algorithm.name} weighs clients by {weighting}, and Flower's "
            "accountant assumes their uniform average"
        )
    return None


class PrivacyAccount:
    """epsilon at delta over the releases so far, by Flower's RDP accountant."""

    def __init__(
        self, *, noise_multiplier: float, sample_size: int, population: int, delta: float
    ) -> None:
        self.delta = float(delta)
        self.event = GaussianPrivacyEvent(
            noise_multiplier=float(noise_multiplier),
            sample_size=int(sample_size),
            population_size=int(population),
        )
        self.accountant = RdpAccountant(
            PrivacyConfig(
                target_delta=self.delta,
                population_size=int(population),
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION,
            )
        )

    @classmethod
    def for_run(cls, cfg: DictConfig) -> PrivacyAccount:
        return cls(
            noise_multiplier=float(cfg.privacy.noise_multiplier),
            sample_size=clients_per_round(cfg),
            population=int(cfg.num_clients),
            delta=float(cfg.privacy.delta),
        )

    def release(self) -> float:
        """Compose one round's release; the epsilon spent so far."""
        self.accountant.compose(self.event)
        return self.epsilon()

    def epsilon(self) -> float:
        if self.accountant.num_releases == 0:
            return 0.0
        return self.accountant.get_epsilon(self.delta)

    def state_dict(self) -> dict[str, np.ndarray]:
        text = json.dumps(self.accountant.state_dict()).encode()
        return {f"{_STATE}account": np.frombuffer(text, dtype=np.uint8).copy()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        raw = state.get(f"{_STATE}account")
        if raw is not None:
            self.accountant.load_state_dict(json.loads(np.asarray(raw).tobytes().decode()))

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(_STATE)
