"""The privacy account: epsilon at delta over a run's releases, by Flower's RDP accountant.

Accounting (fixed clipping, `privacy.accounting`) uses the release model Flower's wrappers
support: every sampled client, no amplification by sampling, add-or-remove-one neighbours.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant
from omegaconf import DictConfig

from fl_system.privacy.checks import clients_per_round

_STATE = "privacy/"


class PrivacyAccount:
    """epsilon at delta over the releases so far, by Flower's RDP accountant."""

    def __init__(
        self, *, noise_multiplier: float, sample_size: int, population: int, delta: float
    ) -> None:
        self.delta = float(delta)
        self.event = GaussianPrivacyEvent(
            noise_multiplier=float(noise_multiplier),
            sample_size=int(sample_size),
            population_size=int(population),
        )
        self.accountant = RdpAccountant(
            PrivacyConfig(
                target_delta=self.delta,
                population_size=int(population),
                neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=SamplingMethod.NO_AMPLIFICATION,
            )
        )

    @classmethod
    def for_run(cls, cfg: DictConfig) -> PrivacyAccount:
        return cls(
            noise_multiplier=float(cfg.privacy.noise_multiplier),
            sample_size=clients_per_round(cfg),
            population=int(cfg.num_clients),
            delta=float(cfg.privacy.delta),
        )

    def release(self) -> float:
        """Compose one round's release; the epsilon spent so far."""
        self.accountant.compose(self.event)
        return self.epsilon()

    def epsilon(self) -> float:
        if self.accountant.num_releases == 0:
            return 0.0
        return self.accountant.get_epsilon(self.delta)

    def state_dict(self) -> dict[str, np.ndarray]:
        text = json.dumps(self.accountant.state_dict()).encode()
        return {f"{_STATE}account": np.frombuffer(text, dtype=np.uint8).copy()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        raw = state.get(f"{_STATE}account")
        if raw is not None:
            self.accountant.load_state_dict(json.loads(np.asarray(raw).tobytes().decode()))

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(_STATE)
