"""FedAsync (Xie, Koyejo and Gupta 2019): a server step on every update, mixing the client's
model in with alpha * s(staleness) (`async.staleness`: constant, polynomial or hinge, the
paper's three). The math: `fedasync_math.py`; the clients train as FedProx's do, with the
paper's optional proximal term rho / 2 ||x - x_tau||^2 as `mu` (0: plain SGD).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import numpy as np
from omegaconf import OmegaConf

from fl_system.settings.value_checks import ConfigError
from server_app.async_loop import Update
from server_app.federated.asynchronous import AsynchronousStrategy
from server_app.federated.experiment_binding import Common
from server_app.strategies.fedasync_math import fedasync_step


class FedAsync(AsynchronousStrategy):
    """Server half of FedAsync.

    Parameters
    ----------
    alpha : Optional[float] (default: 0.6)
        The mixing weight of a fresh update (the paper's alpha).
    mu : Optional[float] (default: 0.0)
        The clients' proximal term (the paper's rho).
    **common
        The arguments every strategy takes (`FederatedStrategy`), the `async.*` group's
        settings among them (`async.buffer_size` is FedBuff's: FedAsync steps on each).
    """

    buffered = False
    robust_aggregation = False  # a step per update: no buffer for a robust rule to act on

    def __init__(
        self, *, alpha: float | None = None, mu: float | None = None, **common: Unpack[Common]
    ) -> None:
        super().__init__(settings={"algorithm.alpha": alpha, "algorithm.mu": mu}, **common)
        if OmegaConf.select(self.experiment, "algorithm.disco.enabled"):
            raise ConfigError(
                "algorithm=fedasync: algorithm.disco.enabled=true is refused: each step takes "
                "one update, so there are no clients to weigh against each other (FedBuff's "
                "buffer has them)"
            )
        self.alpha = float(self.experiment.algorithm.alpha)
        if not 0 < self.alpha <= 1:
            raise ConfigError(f"algorithm.alpha must be in (0, 1], got {self.alpha}")

    def step(self, current: list[np.ndarray], updates: Sequence[Update]) -> list[np.ndarray]:
        (update,) = updates
        return fedasync_step(current, update.model, self.alpha * self.scale(update.staleness))
