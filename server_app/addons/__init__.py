"""Server halves of add-ons: pieces that compose with any averaging strategy.

An add-on is a config node under `algorithm` with `enabled`, `server` and `client` keys
(`algorithm.disco`, `algorithm.gsnr`); `fl_system.config.experiment.enabled_addons` finds them. Its
server half overrides the hooks below that it needs, e.g. a weighting (FedDisco) replaces
the averaging weights, a step schedule (FedGSNR) runs an exchange before training and gives
each client its own settings. The strategy calls every hook of every enabled add-on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import MetricRecord

from server_app.federated.replies import ClientReply
from server_app.rounds import PlanSteps, RoundPlan, Scalar, no_exchange


class ServerAddon:
    """Every hook is a no-op; an add-on overrides what it changes."""

    name = ""  # its key under `algorithm.` (`disco`, `gsnr`), for messages
    state_prefix = ""  # the add-on's checkpoint keys start with this, e.g. "disco/"
    weighting: str | None = None  # how it weighs clients, if it replaces the strategy's weights
    classification_only: str | None = None  # why it cannot run task=regression, if it cannot

    def owns(self, key: str) -> bool:
        """Whether a checkpoint key is this add-on's."""
        return bool(self.state_prefix) and key.startswith(self.state_prefix)

    def on_join(self, partition_id: int, metrics: MetricRecord) -> None:
        """What a node reported at its handshake (e.g. label counts)."""

    def secure_sum(self) -> str | None:
        """The name of a sum this add-on needs from every client and may learn only in total
        (secagg=secaggplus), while it still needs it; the driver sums it before the round."""
        return None

    def take_secure_sum(self, total: list[np.ndarray]) -> None:
        """The sum `secure_sum` named, over every client the driver asked."""
        raise NotImplementedError(f"{type(self).__name__} asks for no secure sum")

    def shared_config(self) -> dict[str, Scalar | list[float]]:
        """Config values every train message carries this round."""
        return {}

    def prepare(self, plan: RoundPlan) -> PlanSteps:
        """Exchanges before training that refine the plan (whom to train, with what)."""
        return no_exchange(plan)

    def weights(self, replies: Sequence[ClientReply]) -> np.ndarray | None:
        """p_k over the usable replies, or None to keep the strategy's own weights."""
        return None

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """Entries for summary.json, from the run's metrics rows."""
        return {}

    def state_dict(self) -> dict[str, np.ndarray]:
        """State that must survive a restart; keys carry the add-on's prefix."""
        return {}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore `state_dict()`."""


class StepSchedule(ServerAddon):
    """An add-on that decides each client's number of local steps (FedGSNR).

    Strategies whose aggregation undoes a step allocation (FedNova) refuse it.
    """


Refusal = tuple[type[ServerAddon], str]  # a kind of add-on a strategy cannot take, and why


def check_refusals(addons: Sequence[ServerAddon], refused: Sequence[Refusal], name: str) -> None:
    """One clear error for an enabled add-on that algorithm `name` cannot take."""
    for addon in addons:
        for kind, why in refused:
            if isinstance(addon, kind):
                raise ValueError(
                    f"algorithm.{addon.name}.enabled=true cannot be used with {name}: {why}"
                )
