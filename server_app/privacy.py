"""The server's side of `privacy=...`: Flower's DP wrapper around the strategy, the account,
where the noise comes from and what the run publishes.

`Privacy.flower` is what Flower's own loop would be given: the strategy wrapped in the DP
wrapper the config names, or the strategy itself. (Under central DP the strategy already
averages uniformly where its rule would weigh by data size, as the noise calibration and
Flower's accountant assume: `FederatedStrategy.uniform_weights`.) `release` decides what a
round may publish: under accounting, only the average over every sampled client (Flower's
strict mode; otherwise the model stays and no epsilon is spent), each release composed into
the account. Under `privacy=local` each client's own (epsilon, delta) per release composes
over the rounds it trains in (`LocalAccount`: dp_local_epsilon, the most exposed client's).
The noise comes from the operating system's entropy (`fl_system.privacy.noise`):
`privacy.reproducible_noise=true` draws it from the seed instead, for debugging, and then
every epsilon the run writes is `dp_epsilon_void`. `published_row`/`published_summary` keep
what the run may publish (`fl_system.privacy.published`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.serverapp.strategy import Strategy
from omegaconf import DictConfig

from fl_system import privacy
from fl_system.privacy import noise, published
from fl_system.privacy.account import LocalAccount
from fl_system.records import run_log
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundRecord

log = logging.getLogger(__name__)

_CLIPPING_NORM = "privacy/clipping_norm"  # an adaptive wrapper's current norm
NOISE_FROM_OS = "operating system entropy: not reproducible, not by the seed either"
NOISE_FROM_SEED = "the seed (privacy.reproducible_noise=true): epsilon is void"


class Privacy:
    """The run's DP wrapper and its privacy account (None when not accounted)."""

    def __init__(self, strategy: FederatedStrategy, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.mode = privacy.mode(cfg)
        self.flower: Strategy = strategy
        self.account: privacy.PrivacyAccount | None = None
        self.local: LocalAccount | None = None
        self.reproducible = self.mode != "none" and bool(cfg.privacy.reproducible_noise)
        void = "_void" if self.reproducible else ""
        self.epsilon_key = f"dp_epsilon{void}"
        self.local_key = f"dp_local_epsilon{void}"
        if self.mode == "none":
            return
        if self.mode == "local":
            self.local = LocalAccount(epsilon=cfg.privacy.epsilon, delta=cfg.privacy.delta)
        if self.reproducible:
            run_log.say(
                run_log.warning_line(
                    f"privacy={self.mode} with privacy.reproducible_noise=true: the noise is "
                    "drawn from the seed, so anyone with this run's config can regenerate and "
                    "subtract it; its epsilon is void (dp_epsilon_void). For debugging only"
                )
            )
        else:
            run_log.say(f"privacy={self.mode}: DP noise from {NOISE_FROM_OS}")
        if published.withholds(cfg):
            run_log.say(
                f"privacy={self.mode}: the run publishes its central evaluation and its "
                "account only (privacy.publish_client_stats=true adds the clients' "
                "statistics, which epsilon does not cover)"
            )
        else:
            run_log.say(run_log.warning_line(published.WARNING))
        if cfg.privacy.server is None:
            return
        self.flower = privacy.build_wrapper(cfg, strategy)
        why_not = privacy.unaccounted_reason(cfg, strategy)
        if why_not is not None:
            log.warning("privacy=%s runs unaccounted (no dp_epsilon): %s", self.mode, why_not)
        elif cfg.privacy.get("accounting"):
            self.account = privacy.PrivacyAccount.for_run(cfg)

    def noise(self, rnd: int) -> contextlib.AbstractContextManager[None]:
        """Where round `rnd`'s server-side noise comes from: fresh OS entropy, or the seed."""
        if self.reproducible:
            return noise.reproducible(int(self.cfg.seed), rnd)
        return contextlib.nullcontext()

    def release(self, record: RoundRecord) -> tuple[bool, dict[str, float]]:
        """Whether the round's model may be published, and its privacy columns."""
        if self.local is not None:
            epsilon, delta = self.local.release(record.plan.nodes.values())
            return True, {self.local_key: epsilon, "dp_local_delta": delta}
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
            return False, {self.epsilon_key: self.account.epsilon()}
        return True, {self.epsilon_key: self.account.release()}

    def published_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The round's columns this run may publish."""
        return published.published_row(row, self.cfg)

    def summary(self, summary: Mapping[str, Any]) -> dict[str, Any]:
        """summary.json as this run may publish it, with its epsilon and noise source."""
        out = published.published_summary(summary, self.cfg)
        if self.mode != "none":
            out["dp_noise"] = NOISE_FROM_SEED if self.reproducible else NOISE_FROM_OS
        if self.account is not None:
            out[self.epsilon_key] = self.account.epsilon()
            out["dp_delta"] = self.account.delta
        if self.local is not None:
            out[self.local_key], out["dp_local_delta"] = self.local.spent()
        return out

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        state = self.account.state_dict() if self.account is not None else {}
        if self.local is not None:
            state.update(self.local.state_dict())
        norm = getattr(self.flower, "clipping_norm", None)
        if "adaptive" in self.mode and norm is not None:
            state[_CLIPPING_NORM] = np.array([float(norm)])
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        if self.account is not None:
            self.account.load_state_dict(state)
        if self.local is not None:
            self.local.load_state_dict(state)
        if _CLIPPING_NORM in state:
            self.flower.clipping_norm = float(state[_CLIPPING_NORM][0])  # type: ignore[attr-defined]

    @staticmethod
    def owns(key: str) -> bool:
        return privacy.PrivacyAccount.owns(key)
