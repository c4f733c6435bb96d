"""The server's side of `privacy=...`: Flower's DP wrapper around the strategy, and the account.

`Privacy.flower` is what Flower's own loop would be given: the strategy wrapped in the DP
wrapper the config names, or the strategy itself. (Under central DP the strategy already
averages uniformly where its rule would weigh by data size, as the noise calibration and
Flower's accountant assume: `FederatedStrategy.uniform_weights`.) `release` decides what a
round may publish: under accounting, only the average over every sampled client (Flower's
strict mode; otherwise the model stays and no epsilon is spent), each release composed into
the account.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np
from flwr.serverapp.strategy import Strategy
from omegaconf import DictConfig

from fl_system import privacy
from server_app.rounds import RoundRecord
from server_app.strategies.base import FederatedStrategy

log = logging.getLogger(__name__)

_CLIPPING_NORM = "privacy/clipping_norm"  # an adaptive wrapper's current norm


class Privacy:
    """The run's DP wrapper and its privacy account (None when not accounted)."""

    def __init__(self, strategy: FederatedStrategy, cfg: DictConfig) -> None:
        self.mode = privacy.mode(cfg)
        self.flower: Strategy = strategy
        self.account: privacy.PrivacyAccount | None = None
        if cfg.privacy.server is None:
            return
        self.flower = privacy.build_wrapper(cfg, strategy)
        why_not = privacy.unaccounted_reason(cfg, strategy)
        if why_not is not None:
            log.warning("privacy=%s runs unaccounted (no dp_epsilon): %s", self.mode, why_not)
        elif cfg.privacy.get("accounting"):
            self.account = privacy.PrivacyAccount.for_run(cfg)

    def release(self, record: RoundRecord) -> tuple[bool, dict[str, float]]:
        """Whether the round's model may be published, and its privacy columns."""
        if self.account is None:
            return True, {}
        if record.result.participants < record.chosen:
            log.warning(
                "round %d: %d of %d sampled clients' updates were usable; an accounted round "
                "publishes only the average over all of them, so the model stays and no "
                "epsilon is spent",
                record.plan.round,
                record.result.participants,
                record.chosen,
            )
            return False, {"dp_epsilon": self.account.epsilon()}
        return True, {"dp_epsilon": self.account.release()}

    def summary(self) -> dict[str, float]:
        """summary.json: the epsilon spent at delta, when accounted."""
        if self.account is None:
            return {}
        return {"dp_epsilon": self.account.epsilon(), "dp_delta": self.account.delta}

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        state = self.account.state_dict() if self.account is not None else {}
        norm = getattr(self.flower, "clipping_norm", None)
        if "adaptive" in self.mode and norm is not None:
            state[_CLIPPING_NORM] = np.array([float(norm)])
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        if self.account is not None:
            self.account.load_state_dict(state)
        if _CLIPPING_NORM in state:
            self.flower.clipping_norm = float(state[_CLIPPING_NORM][0])  # type: ignore[attr-defined]

    @staticmethod
    def owns(key: str) -> bool:
        return privacy.PrivacyAccount.owns(key)
