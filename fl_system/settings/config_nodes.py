"""Config nodes to objects, and the config as JSON: what fl-run needs before torch.

fl-run starts its runtime as soon as the values are checked; the runtime's start needs these
and nothing that imports torch (fl_system.config.experiment does: ~1.3 s that now overlaps it).
"""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from fl_system.settings import resolvers
from fl_system.settings.value_checks import ConfigError

resolvers.register()


def new_run_id() -> str:
    """A fresh id for a new run; its resumptions keep it (it is in the checkpointed config)."""
    return uuid.uuid4().hex[:16]


def build(node: DictConfig, *, label: str | None = None, **overrides: Any) -> Any:
    """Instantiate a config group node; its descriptive `name` key is not an argument.

    Errors are prefixed with `label`, else the node's name, else its target (unless they
    already start with it); a ConfigError, which names its setting, passes as it is.
    """
    params = OmegaConf.to_container(node, resolve=True)
    assert isinstance(params, dict)
    name = params.pop("name", params.get("_target_"))
    name = label or name
    try:
        return instantiate(params, **overrides, _convert_="all")
    except InstantiationException as err:
        if isinstance(err.__cause__, ConfigError):
            raise err.__cause__ from None
        cause = str(err.__cause__ or err)
        raise ConfigError(cause if name and cause.startswith(name) else f"{name}: {cause}") from err


def config_to_json(cfg: DictConfig) -> str:
    """The resolved config as JSON: what travels to the ServerApp and the clients."""
    return json.dumps(OmegaConf.to_container(cfg, resolve=True), sort_keys=True)


@functools.lru_cache(maxsize=8)
def config_from_json(text: str) -> DictConfig:
    """Parsed once per process: a simulated client handles many messages of one run.

    The result is shared between callers and read-only.
    """
    cfg = OmegaConf.create(json.loads(text))
    OmegaConf.set_readonly(cfg, True)
    return cfg
