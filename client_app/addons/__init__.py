"""Client halves of add-ons, and the hooks local rules share with them.

The ClientApp calls these hooks on the run's local rule and on every enabled add-on's client
half (`algorithm.<name>.client`), so an add-on adds handshake metrics, reply metrics or a query
answer without any edit of `client_app/app.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict
from torch import nn

LocalData = tuple[np.ndarray, np.ndarray]  # this client's training inputs and labels


class ClientHooks:
    """Every hook is a no-op; `question` names the query this object answers, if any, and
    `summed` the secure sum it contributes a term to (secagg=secaggplus), if any."""

    question: str | None = None
    summed: str | None = None

    def handshake_metrics(self, data: Callable[[], LocalData]) -> dict[str, list[float]]:
        """Metrics for the handshake reply; `data()` loads the local data when needed."""
        return {}

    def reply_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """Metrics added to every train reply; `config` is the message's config."""
        return {}

    def weighing_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """What the server weighs this client by, known before training: under secure
        aggregation it is sent at the protocol's setup, since a weight is fixed before masking."""
        return {}

    def summand(self, data: LocalData) -> np.ndarray:
        """This client's term of the sum `summed`, which the server learns only in total."""
        raise NotImplementedError(f"{type(self).__name__} contributes to no secure sum")

    def answer(
        self,
        model: nn.Module,
        data: LocalData,
        received: RecordDict,
        *,
        seed: int,
        device: torch.device,
    ) -> RecordDict:
        """The reply to `question`, with `model` holding the weights the query carried."""
        raise NotImplementedError(f"{type(self).__name__} answers no query")
