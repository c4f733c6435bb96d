"""What composes with Flower's differential privacy, checked before anything starts.

The mechanisms are Flower's own: the server-side wrappers of a Strategy
(`DifferentialPrivacy{ServerSide,ClientSide}{Fixed,Adaptive}Clipping`) and the client mods
(`fixedclipping_mod`, `adaptiveclipping_mod`, `LocalDpMod`). Their limits, read from their
source, decide what is refused: the mods refuse messages that carry more than one ArrayRecord
(and one ConfigRecord), server-side clipping clips every record of a reply against the global
model, and the noise is calibrated to the uniform mean of clipped updates. So a run under
privacy needs a rule whose clients start from the global model and reply with their model
alone, whose decisions do not come from the un-noised updates, no compression (clipping must
see the real update) and the plain mean (`aggregation.robust=mean`). A rule that weighs
clients other than uniformly (Disco's weights, FedNova's steps) runs unaccounted: the
accountant's guarantee is for the uniform average.

The same checks run for fl-run (`check_privacy`), for a strategy built with an experiment
under privacy, and for a strategy wrapped in Flower's wrapper in a Flower app of one's own
(`fl_system.privacy.wrappers`): one sentence each, wherever it is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from fl_system.settings.config_nodes import build
from fl_system.settings.value_checks import ConfigError

FIXED = ("central_fixed", "client_fixed")  # what Flower's accountant covers
ON_CLIENTS = ("client_fixed", "client_adaptive", "local")  # mechanisms run by client mods

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
    "reproducible_noise": (lambda v: isinstance(v, bool), "true or false"),
    "publish_client_stats": (lambda v: isinstance(v, bool), "true or false"),
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
    """fl-run's check: raise ConfigError, one line naming why, if the run's privacy cannot
    compose (Flower's own checks of its settings included)."""
    name = mode(cfg)
    if name == "none":
        return
    check_composition(cfg, strategy, name)
    try:  # Flower's own checks of its settings, e.g. adaptive clipping's noise split
        build_wrapper(cfg, strategy)
        if cfg.privacy.client is not None:
            build(cfg.privacy.client, label="privacy")
    except ValueError as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"privacy={name}: {err}") from None


def check_composition(cfg: DictConfig, strategy: Any, name: str) -> None:
    """Raise ConfigError if privacy mode `name` cannot run `strategy` with the rest of `cfg`
    (the experiment's privacy settings are checked where it has them)."""
    head = f"privacy={name}"
    for key, (ok, expected) in RULES.items():
        value = OmegaConf.select(cfg, f"privacy.{key}", default=None)
        if value is not None and not ok(value):
            raise ConfigError(f"privacy.{key} must be {expected}, got {value!r}")
    check_rule(strategy, name, OmegaConf.select(cfg, "algorithm.name", default=None))
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
    if mode(cfg) == name and cfg.privacy.get("accounting") and name not in FIXED:
        raise ConfigError(
            f"{head}: Flower's accountant covers fixed clipping only; set privacy.accounting=false"
        )


def check_rule(strategy: Any, name: str, algorithm: str | None = None) -> None:
    """Raise ConfigError if privacy mode `name` cannot run the strategy's rule (`algorithm`
    names it; its class name when None)."""
    problem = strategy.privacy_conflict(name)
    if problem is not None:
        algorithm = algorithm or type(strategy).__name__.lower()
        raise ConfigError(f"privacy={name} does not compose with algorithm={algorithm}: {problem}")


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
