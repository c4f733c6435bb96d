"""The base of the strategies without rounds (FedBuff, FedAsync): fl-run's round driver calls
`async_step` where it runs a synchronous round, so one row of metrics.csv, one evaluation
every `eval_every` and one checkpoint every `checkpoint.every` are per server step, and
`num_rounds` counts server steps. The settings shared by both live in the `async.*` group.

Flower's own loop (`Strategy.start`) is a sequence of synchronous rounds: these strategies
refuse it with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from omegaconf import DictConfig, OmegaConf

from fl_system.learning.staleness import staleness_weight
from fl_system.records import run_log
from fl_system.settings.value_checks import ConfigError
from server_app.async_clocks import Times, VirtualTimes, WallTimes
from server_app.async_loop import Update
from server_app.async_steps import AsyncSettings, AsyncSteps
from server_app.federated.experiment_binding import Common
from server_app.federated.replies import ClientReply
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan, RunFailed


def _is(value: object) -> Callable[[object], bool]:
    return lambda v: v == value


def _is_not(value: object) -> Callable[[object], bool]:
    return lambda v: v != value


# What does not compose yet, and why (checked in this order; one line each)
_REFUSED: tuple[tuple[str, Callable[[object], bool], str], ...] = (
    ("privacy.name", _is_not("none"), "DP accounting assumes rounds of sampled clients"),
    ("client_eval.enabled", _is(True), "per-client evaluation would wait for tasks in flight"),
    (
        "evaluation.mode",
        _is_not("central"),
        "the nodes' own scoring would wait for tasks in flight",
    ),
    ("system.round_deadline", _is_not(None), "there are no rounds to set a deadline for"),
    ("system.first_k", _is_not(None), "there are no rounds: every update counts as it arrives"),
    ("clients_per_round", _is_not(None), "async.concurrency says how many clients train at once"),
    ("algorithm.gsnr.enabled", _is(True), "GSNR's step schedule is per round"),
)


def refusal(cfg: DictConfig) -> str | None:
    """Why an asynchronous run of `cfg` cannot go ahead (None: it can)."""
    simulated, system = cfg.runtime.name == "simulation", cfg.system.name
    if simulated and system == "none":
        return (
            "system.name=none is refused: it orders updates by when each client finishes: in "
            "simulation it needs a virtual clock (system=profiles, mobile, slow_uplink or trace)"
        )
    if not simulated and system != "none":
        return (
            f"system.name={system} is refused with runtime={cfg.runtime.name}: real nodes "
            "finish when they finish, and updates are taken as they reach the server (system=none)"
        )
    for key, refused, why in _REFUSED:
        value = OmegaConf.select(cfg, key)
        if refused(value):
            return f"{key}={value} is refused: {why}"
    return None


class AsynchronousStrategy(FederatedStrategy):
    """A `FederatedStrategy` whose server steps as updates arrive; subclasses implement
    `step(current, updates)`.

    Parameters
    ----------
    **common
        The arguments every strategy takes (`FederatedStrategy`); the experiment's `async.*`
        settings (`concurrency`, `buffer_size`, `max_staleness`, `staleness`, `a`, `b`).
    """

    buffered = True  # False: a step per update (FedAsync), whatever async.buffer_size says

    def __init__(
        self, *, settings: Mapping[str, Any] | None = None, **common: Unpack[Common]
    ) -> None:
        super().__init__(settings=settings, **common)
        cfg = self.experiment
        if (problem := refusal(cfg)) is not None:
            raise ConfigError(f"algorithm={cfg.algorithm.name}: {problem}")
        group = cfg["async"]
        self.staleness = (str(group.staleness), float(group.a), float(group.b))
        clock = self.federation.clock
        times: Times = WallTimes() if clock is None else VirtualTimes(clock.system, self.step_cost)
        max_staleness = OmegaConf.select(cfg, "async.max_staleness")
        self.steps = AsyncSteps(
            AsyncSettings(
                int(group.concurrency),
                int(group.buffer_size) if self.buffered else 1,
                None if max_staleness is None else int(max_staleness),
            ),
            self.step,
            times,
            seed=int(cfg.seed),
            timeout=float(cfg.round_timeout),
            compression=self.federation.compression,
            stragglers=self.federation.stragglers,
            broadcasts=self.federation if self.federation.downlink is not None else None,
        )

    def scale(self, staleness: int) -> float:
        """s(staleness) under `async.staleness` (and its `a`, `b`)."""
        kind, a, b = self.staleness
        return staleness_weight(staleness, kind, a=a, b=b)

    def step(self, current: list[np.ndarray], updates: Sequence[Update]) -> list[np.ndarray]:
        """The model after a server step on `updates` (a full buffer)."""
        raise NotImplementedError

    def async_step(self, grid: Grid, arrays: ArrayRecord) -> tuple[ArrayRecord, dict[str, Any]]:
        """Run until the next server step: its model and its metrics row."""
        registry = self.federation.connect(grid)
        self.federation.start_downlink(arrays)
        timeout = float(self.experiment.round_timeout)
        return self.steps.step(
            grid, lambda gone: registry.refresh(timeout, gone), arrays, self.node_content
        )

    def secagg_conflict(self) -> str | None:
        return "it takes the clients' updates one by one as they come, and SecAgg+ sums a round's"

    # ----- what a synchronous loop would call -------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        raise RunFailed(
            f"{type(self).__name__} has no rounds: it steps as updates arrive, which fl-run's "
            "driver runs (Flower's Strategy.start waits for every round)"
        )

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        raise RunFailed(f"{type(self).__name__} aggregates per server step, not per round")

    # ----- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        return {**super().state_dict(), **self.steps.state_dict()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        said = self.steps.load_state_dict({k: v for k, v in state.items() if AsyncSteps.owns(k)})
        if said:
            run_log.say(said)
        super().load_state_dict({k: v for k, v in state.items() if not AsyncSteps.owns(k)})
