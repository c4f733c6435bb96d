"""A strategy's server-side state that survives a restart: the add-ons' and the federation's,
extended by each strategy with state of its own; saved in the run's checkpoint."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from server_app.federation import Federation

StrategyState = dict[str, np.ndarray]


class CheckpointedState:
    """`state_dict` / `load_state_dict`, as torch modules have them."""

    def state_dict(self) -> StrategyState:
        """Server-side state that must survive a restart (the add-ons', e.g. FedDisco's cache).

        Strategies with state of their own extend this dict: `{**super().state_dict(), ...}`.
        """
        state = {k: v for addon in self.addons for k, v in addon.state_dict().items()}
        state.update(self.federation.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore `state_dict()`; subclasses pop their own keys and pass the rest up."""
        claimed: set[str] = set()
        for addon in self.addons:
            mine = {k: v for k, v in state.items() if addon.owns(k)}
            addon.load_state_dict(mine)
            claimed.update(mine)
        mine = {k: v for k, v in state.items() if Federation.owns(k)}
        self.federation.load_state_dict(mine)
        claimed.update(mine)
        unknown = sorted(set(state) - claimed)
        if unknown:
            raise ValueError(f"{type(self).__name__} does not keep state {unknown}")
