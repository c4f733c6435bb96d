"""Every flwr internal this project relies on, checked at once: the node, the launcher and the
simulation call `check()` at start-up so an flwr upgrade fails loudly, naming what moved."""

from __future__ import annotations

from fl_system.flower import (
    flwr_engine,
    flwr_hooks,
    flwr_tasks,
    object_pulls,
    raise_if,
    stranded_replies,
    telemetry_off,
)
from fl_system.privacy import noise, wrappers


def check() -> None:
    """Raise FlwrInternalsChanged naming everything that moved in the installed flwr."""
    raise_if(
        flwr_hooks.problems()
        + noise.problems()
        + wrappers.problems()
        + flwr_engine.problems()
        + flwr_tasks.problems()
        + object_pulls.problems()
        + stranded_replies.problems()
        + telemetry_off.problems()
    )
