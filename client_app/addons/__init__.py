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
    """Every hook is a no-op; `question` names the query this object answers, if any."""

    question: str | None = None

    def handshake_metrics(self, data: Callable[[], LocalData]) -> dict[str, list[float]]:
        """Metrics for the handshake reply; `data()` loads the local data when needed."""
        return {}

    def reply_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """Metrics added to every train reply; `config` is the message's config."""
        return {}

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
