"""An experiment config composed in-process, as `fl-run` composes it from the command line.

For Flower apps of one's own: a ServerApp builds a strategy with
`experiment=compose_experiment(["algorithm=feddisco", "num_clients=10"])`, and the strategy
hands that config to every client at its handshake. The overrides are checked as `fl-run`
checks them (unknown groups, options and keys, values out of range), with the same one-line
errors.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.config.overrides import (
    check_choices,
    check_keys,
    check_syntax,
    chosen_groups,
    mounted_groups,
    options,
    rewrite,
)
from fl_system.config.validation import check_values
from fl_system.settings.config_nodes import new_run_id
from fl_system.settings.value_checks import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"  # the project's conf/ (source tree)


def prepare(cfg: DictConfig, run_id: str) -> None:
    """What every run's config gets before it starts: its id, and the setting values Hydra's
    parser would misread (`kind=nan` and `kind=inf` name a kind, not a float)."""
    with open_dict(cfg):
        cfg.run_id = run_id
        cfg.clients.malicious.kind = str(cfg.clients.malicious.kind)


def compose_experiment(overrides: Sequence[str] = ()) -> DictConfig:
    """`conf/config.yaml` with `overrides` (Hydra syntax), checked; raises ConfigError."""
    overrides = list(overrides)
    try:
        check_syntax(overrides)
        check_choices(overrides, CONF_DIR)
        overrides = rewrite(overrides, mounted_groups(CONF_DIR), CONF_DIR)
        check_keys(overrides, CONF_DIR)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    cfg = _compose(overrides)
    prepare(cfg, new_run_id())
    check_values(cfg)
    OmegaConf.resolve(cfg)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def default_config(config: Mapping[str, Any]) -> dict:
    """`conf/config.yaml` with `config`'s option of every group (read from the option's
    `name`) and no other override, resolved: what each setting is when nobody sets it."""
    groups = {**{g: g for g in chosen_groups(CONF_DIR)}, **mounted_groups(CONF_DIR)}
    overrides = []
    for package, group in groups.items():
        node: Any = config
        for key in package.split("."):
            node = node.get(key) if isinstance(node, Mapping) else None
        name = node.get("name") if isinstance(node, Mapping) else None
        if name in options(CONF_DIR, group):
            overrides.append(f"{group}={name}" if group == package else f"{group}@{package}={name}")
    out = OmegaConf.to_container(_compose(overrides), resolve=True)
    assert isinstance(out, dict)
    return out


def _compose(overrides: list[str]) -> DictConfig:
    """Hydra's composition (a fresh copy each call: callers set the run id and resolve)."""
    return copy.deepcopy(_composed(tuple(overrides)))


@functools.lru_cache(maxsize=64)
def _composed(overrides: tuple[str, ...]) -> DictConfig:
    """One composition per set of overrides and process: Hydra takes ~0.4 s, and a Flower app
    builds a strategy from the same arguments again and again (tests, restarts)."""
    if GlobalHydra.instance().is_initialized():  # inside fl-run's Hydra app, which reads conf/
        return compose(config_name="config", overrides=list(overrides))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=list(overrides))
