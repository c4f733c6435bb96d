"""The privacy accounts: epsilon at delta over a run's releases, by Flower's RDP accountant
(central noise), or per client by basic composition (`privacy=local`).

Accounting (fixed clipping, `privacy.accounting`) uses the release model Flower's wrappers
support: every sampled client, no amplification by sampling, add-or-remove-one neighbours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

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

    def release(self, rounds: int = 1) -> float:
        """Compose `rounds` rounds' releases (one each); the epsilon spent so far."""
        self.accountant.compose(self.event, rounds)
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


class LocalAccount:
    """privacy=local: each client's (epsilon, delta) per release (Flower's LocalDpMod, its
    noise added before the update leaves the machine), composed over the rounds the client
    was sent training in (basic composition: k releases cost k epsilon and k delta); the run
    reports its most exposed client. It bounds what anyone who sees a client's noised update
    learns of its data. Under secure aggregation the server sees only the sum of the noised
    updates, whose stronger, distributed guarantee (n clients' noise in one sum) is not
    counted: the figure stays a valid upper bound."""

    def __init__(self, *, epsilon: float, delta: float) -> None:
        self.per_release = (float(epsilon), float(delta))
        self.releases: dict[int, int] = {}  # partition -> rounds it was sent training in

    def release(self, partitions: Iterable[int]) -> tuple[float, float]:
        """Count one release for each of `partitions`; (epsilon, delta) spent so far."""
        for pid in partitions:
            self.releases[int(pid)] = self.releases.get(int(pid), 0) + 1
        return self.spent()

    def spent(self) -> tuple[float, float]:
        """(epsilon, delta) of the client released most often."""
        most = max(self.releases.values(), default=0)
        return most * self.per_release[0], most * self.per_release[1]

    def state_dict(self) -> dict[str, np.ndarray]:
        pids = sorted(self.releases)
        return {
            f"{_STATE}local_pids": np.array(pids, dtype=np.int64),
            f"{_STATE}local_releases": np.array([self.releases[p] for p in pids], dtype=np.int64),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        pids = state.get(f"{_STATE}local_pids", np.zeros(0, dtype=np.int64))
        counts = state.get(f"{_STATE}local_releases", np.zeros(0, dtype=np.int64))
        self.releases = {int(p): int(c) for p, c in zip(pids, counts, strict=True)}
