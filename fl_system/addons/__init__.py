"""What an add-on's server and client halves share: its message keys, math and settings.

An add-on composes with any algorithm that accepts it and is named once, from the key users
type down to its modules: `algorithm.<name>.*`, `conf/addon/<name>.yaml` (mounted under
`algorithm.<name>` for every algorithm by conf/config.yaml), `fl_system/addons/<name>.py`,
`server_app/addons/<name>.py` and `client_app/addons/<name>.py`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from fl_system.settings.value_checks import ConfigError, refusal


def check_settings(name: str, values: Mapping[str, Any]) -> None:
    """Refuse, naming `algorithm.<name>.<key>`, a value the rules of add-on `name` reject.

    The rules are its module's SETTINGS; fl-run checks them for every mounted add-on, enabled
    or not, and the add-on's halves check their own arguments with them when built."""
    settings = importlib.import_module(f"{__name__}.{name}").SETTINGS
    for key, rule in settings.items():
        if key in values and (problem := refusal(f"algorithm.{name}.{key}", rule, values[key])):
            raise ConfigError(problem)


def mounted(algorithm: DictConfig) -> list[tuple[str, DictConfig]]:
    """(name, node) of every add-on under `algorithm`, enabled or not, in config order: a node
    with `enabled`, `server` and `client` keys."""
    return [
        (str(name), node)
        for name, node in algorithm.items()
        if isinstance(node, DictConfig) and {"enabled", "server", "client"} <= set(node.keys())
    ]
