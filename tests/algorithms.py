"""The shipped algorithms without rounds (FedBuff, FedAsync): they need a virtual clock and
run in simulation only for now, so the tests that run every algorithm leave them to
tests/integration/test_asynchronous.py."""

from __future__ import annotations

from hydra.utils import get_class
from omegaconf import OmegaConf

from fl_system.config.compose import CONF_DIR
from server_app.federated.asynchronous import AsynchronousStrategy

ASYNCHRONOUS = tuple(
    sorted(
        path.stem
        for path in (CONF_DIR / "algorithm").glob("*.yaml")
        if issubclass(get_class(str(OmegaConf.load(path).strategy._target_)), AsynchronousStrategy)
    )
)
