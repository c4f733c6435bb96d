"""FedBuff (Nguyen et al., AISTATS 2022): buffered asynchronous aggregation.

`async.concurrency` clients train at once, each from the model as it was when it started;
every `async.buffer_size` updates the server steps with rate `eta`, each update weighted by
s(staleness) (the paper's 1/sqrt(1 + staleness): `async.staleness=polynomial`, `a=0.5`).
The math: `fedbuff_math.py`; the clients train as FedAvg's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import numpy as np

from fl_system.settings.value_checks import ConfigError
from server_app.async_loop import Update
from server_app.federated.asynchronous import AsynchronousStrategy
from server_app.federated.experiment_binding import Common
from server_app.strategies.fedbuff_math import fedbuff_step, robust_fedbuff_step


class FedBuff(AsynchronousStrategy):
    """Server half of FedBuff.

    Parameters
    ----------
    eta : Optional[float] (default: 1.0)
        The server's learning rate on the buffer's average update (the paper's eta_g).
    **common
        The arguments every strategy takes (`FederatedStrategy`), the `async.*` group's
        settings among them.
    """

    def __init__(self, *, eta: float | None = None, **common: Unpack[Common]) -> None:
        super().__init__(settings={"algorithm.eta": eta}, **common)
        self.eta = float(self.experiment.algorithm.eta)
        if not self.eta > 0:
            raise ConfigError(f"algorithm.eta must be a positive number, got {self.eta}")

    def step(self, current: list[np.ndarray], updates: Sequence[Update]) -> list[np.ndarray]:
        """The buffer summed in partition order, as a round's replies are (so a buffer of every
        client, all fresh, is FedAvg's round to the bit), weighted by data size or, with Disco
        enabled, by Disco's weights over the buffer's clients; through `aggregation.robust`
        when it is not the mean."""
        updates = sorted(updates, key=lambda u: (u.task.partition, u.task.task_id))
        disco = self.addon_weights([u.reply for u in updates])  # Disco's, over the buffer
        buffer = (
            current,
            [u.model for u in updates],
            [u.start for u in updates],
            [u.weight for u in updates] if disco is None else list(disco),
            [self.scale(u.staleness) for u in updates],
            self.eta,
        )
        if self.robust.name == "mean":
            return fedbuff_step(*buffer)
        return robust_fedbuff_step(*buffer, self.robust.combine)  # aggregation.robust
