"""What a strategy needs of its experiment to run rounds on a Flower `Grid`.

A strategy bound to an experiment config (`FederatedStrategy(experiment=...)`) runs its rounds
through this: it learns which node holds which partition (a handshake that also hands every
client the experiment), samples the round's partitions with the run's seed, applies the
stragglers' budgets, sends the global model as compressed broadcasts under
`compression.down` and decodes compressed updates under `compression.up`, and asks for
per-client evaluation under `client_eval`. Whoever drives the rounds, Flower's
`Strategy.start` or fl_system's driver, the same calls happen in the same order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from omegaconf import DictConfig, OmegaConf

from fl_system import heterogeneity
from fl_system.config.experiment import build_compression
from fl_system.data.node_data import node_held
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol
from fl_system.settings.config_nodes import config_to_json
from server_app import normalisation, stragglers
from server_app.client_eval import ClientEvaluation
from server_app.compression import UpdateTally, expand_replies
from server_app.downlink import Downlink
from server_app.exchange import Courier
from server_app.node_data_check import DataCheck
from server_app.node_model_check import ModelCheck
from server_app.nodes import NODE_LOGS, NodeRegistry
from server_app.rounds import RoundPlan, RoundResult, RunFailed
from server_app.virtual_clock import VirtualClock

log = logging.getLogger(__name__)


def sample_partitions(
    seed: int, clients_per_round: int | None, server_round: int, available: Sequence[int]
) -> list[int]:
    """This round's participants: all, or `clients_per_round` drawn with a per-round seed."""
    k = clients_per_round
    if k is None or k >= len(available):
        return sorted(available)
    rng = np.random.default_rng(derive_seed(seed, server_round, 0x5A3))
    return sorted(int(p) for p in rng.choice(sorted(available), size=k, replace=False))


def _vets(cfg: DictConfig, say: Callable[[str], None]) -> Callable[[int, Message], str | None]:
    """A joining node's checks, in order: the model it builds, then the data it holds."""
    checks = [ModelCheck(cfg), *([DataCheck(cfg, say)] if node_held(cfg) else [])]

    def vet(partition: int, reply: Message) -> str | None:
        return next((r for check in checks if (r := check(partition, reply)) is not None), None)

    return vet


def _downlink(cfg: DictConfig) -> Downlink | None:
    """`compression.down`'s broadcasts of the global model (None: sent whole)."""
    down = build_compression(cfg, "down")
    if down is None:
        return None
    apply = OmegaConf.select(cfg, "compression.server_apply") or "recommended"
    return Downlink(down, seed=int(cfg.seed), server_apply=str(apply))


def _registry(
    grid: Grid,
    cfg: DictConfig,
    on_join: Callable[[int, MetricRecord], None] | None,
    say: Callable[[str], None],
) -> NodeRegistry:
    """The grid's nodes, each handshaked with the experiment and vetted as it joins."""
    simulated = OmegaConf.select(cfg, "runtime.name") == "simulation"
    return NodeRegistry(
        grid,
        config_to_json(cfg),
        num_partitions=int(cfg.num_clients),
        on_join=on_join,
        vet=_vets(cfg, say),
        logs="logs/serverapp.log has its traceback" if simulated else NODE_LOGS,
        say=say,
    )


class Federation:
    """The nodes of one grid and the experiment's round settings."""

    def __init__(
        self,
        cfg: DictConfig,
        *,
        on_join: Callable[[int, MetricRecord], None] | None = None,
        step_cost: float = 1.0,
    ) -> None:
        self.cfg = cfg
        self.on_join = on_join
        self.compression = build_compression(cfg)
        self.downlink = _downlink(cfg)
        self.stragglers = stragglers.from_config(cfg)
        model = heterogeneity.from_config(cfg)
        self.clock = (
            VirtualClock(model, compression=self.compression, step_cost=step_cost)
            if model is not None
            else None
        )
        self.client_eval = ClientEvaluation.from_config(cfg)
        self.courier = Courier(
            timeout=float(cfg.round_timeout),
            max_reply_ratio=OmegaConf.select(cfg, "aggregation.max_reply_ratio"),
            # Flower's client mods (privacy on the clients) read plain records only
            pack=OmegaConf.select(cfg, "privacy.client") is None,
        )
        self.nodes: NodeRegistry | None = None
        self.normalisation: normalisation.Normalisation | None = None  # normalize=federated
        self._grid: Grid | None = None
        self._downlink_state: Mapping[str, np.ndarray] | None = None  # until the model is known

    # ----- the nodes -----------------------------------------------------------------------
    def connect(self, grid: Grid, *, say: Callable[[str], None] = log.info) -> NodeRegistry:
        """Wait for the clients a round needs (once per grid), handshaking each new node."""
        if self.nodes is None or self._grid is not grid:
            self._grid = grid
            self.nodes = _registry(grid, self.cfg, self.on_join, say)
            per_round = self.cfg.clients_per_round
            nodes = self.nodes.wait_for(
                int(self.cfg.num_clients if per_round is None else per_round),
                float(self.cfg.round_timeout),
            )
            if self._normalises_federated():
                self.normalisation = normalisation.derive(
                    grid, nodes, timeout=float(self.cfg.round_timeout), say=say
                )
                self.cfg = self.normalisation.completed(self.cfg)
                self.nodes.reconfigure(config_to_json(self.cfg), float(self.cfg.round_timeout))
        return self.nodes

    def _refresh(self, grid: Grid) -> dict[int, int]:
        """The nodes now (node -> partition): new ones handshaked, those gone forgotten."""
        registry = self.connect(grid)
        return registry.refresh(float(self.cfg.round_timeout), gone=self.courier.take_gone())

    def _normalises_federated(self) -> bool:
        return (
            node_held(self.cfg)
            and self.cfg.dataset.get("normalize") == "federated"
            and self.cfg.dataset.get("mean") is None
        )

    def take_handshake_bytes(self) -> tuple[int, int]:
        """(up, down) bytes of handshakes since the last call (counted into a round)."""
        return self.nodes.take_handshake_bytes() if self.nodes is not None else (0, 0)

    def plan(
        self,
        grid: Grid,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        *,
        excluded: frozenset[int],
        choose: Callable[[int, Sequence[int]], list[int] | None],
        partial_work: bool,
    ) -> tuple[RoundPlan, int]:
        """The round's plan (whom to train, with what) and how many partitions were chosen."""
        self.start_downlink(arrays)
        self.courier.begin_round(server_round, arrays)
        nodes = self._refresh(grid)
        node_of = {pid: node for node, pid in nodes.items()}
        if len(excluded) >= int(self.cfg.num_clients):
            raise RunFailed(
                f"round {server_round}: every client is expelled (partitions "
                f"{', '.join(map(str, sorted(excluded)))}); nothing is left to train"
            )
        available = sorted(p for p in node_of if p not in excluded)
        if self.clock is not None:  # those online at the round's virtual start
            available = self.clock.online(server_round, available)
        chosen = choose(server_round, available)
        if chosen is None:
            chosen = sample_partitions(
                int(self.cfg.seed), self.cfg.clients_per_round, server_round, available
            )
        scoring = self.client_eval.train_config(server_round) if self.client_eval else {}
        plan = RoundPlan(
            round=server_round,
            arrays=arrays,
            config=ConfigRecord({**config, protocol.SERVER_ROUND: server_round, **scoring}),
            nodes={node_of[pid]: pid for pid in chosen},
        )
        if self.stragglers is not None:
            plan = self.stragglers.apply(plan, partial_work=partial_work)
        if self.clock is not None:
            plan = self.clock.fit_deadline(plan, partial_work=partial_work)
        return plan, len(chosen)

    # ----- messages out and in -------------------------------------------------------------
    def outgoing(
        self,
        messages: Sequence[Message],
        nodes: Mapping[int, int],
        model: ArrayRecord,
        version: int | None = None,
    ) -> list[Message]:
        """The messages as they travel: under compression.down, the global model they carry
        (of `version`, if not the latest) replaced per client by the broadcasts it misses."""
        if self.downlink is None:
            return list(messages)
        return self.downlink.outgoing(messages, nodes, model, version)

    def forget_clients(self) -> None:
        """compression.down: every client gets the whole model next."""
        if self.downlink is not None:
            self.downlink.forget_clients()

    def confirm(self, replies: Sequence[Message]) -> None:
        """compression.down: the replying clients hold the version they were sent."""
        if self.downlink is not None:
            self.downlink.confirm(replies)

    def received(self, sent: Sequence[Message], replies: Sequence[Message]) -> UpdateTally:
        """Replies made whole, in place (the courier unpacked them on arrival; Flower's loop
        gets plain ones): their clients' model versions noted, compressed updates decoded
        against the model each node was sent, and nodes that went away noted for the next
        refresh."""
        self.courier.note_gone(replies)
        self.confirm(replies)
        if self.compression is None:
            return UpdateTally()
        return expand_replies(self.compression, sent, replies)

    def finished(self, plan: RoundPlan, replies: list[Message]) -> list[Message]:
        """The training replies that finished in (virtual) time: all of them without a clock."""
        if self.clock is None:
            return replies
        return self.clock.settle(plan, replies, self.courier.node_messages)

    def close_round(self, server_round: int, result: RoundResult) -> bool:
        """The virtual clock's columns into the round's metrics; whether the clock is why no
        reply counted (such a round keeps the model, as one nobody could work in does)."""
        if self.clock is None:
            return False
        rejected = self.clock.rejected
        result.metrics.update(self.clock.close())
        if result.arrays is None and result.failures and len(result.failures) == rejected:
            log.warning(
                "round %d: no client finished in (virtual) time: the model stays", server_round
            )
            return True
        return False

    # ----- the global model ----------------------------------------------------------------
    def commit(
        self, arrays: ArrayRecord, server_round: int, *, keep_pending: bool = False
    ) -> tuple[ArrayRecord, dict[str, int]]:
        """The new global model as clients will hold it, and what its broadcast weighed
        (`keep_pending`: asynchronous tasks in flight are confirmed later)."""
        if self.downlink is None:
            return arrays, {}
        held, size = self.downlink.commit(arrays, server_round, keep_pending=keep_pending)
        shapes = [layer.shape for layer in (self.downlink.held or {}).values()]
        analytic = self.downlink.compression.analytic_bits
        return held, {
            "broadcast_bytes": size,  # spec 2.9's analytic bits of one broadcast beside it
            "broadcast_bits_naive": round(analytic(shapes)),
            "broadcast_bits_golomb": round(analytic(shapes, golomb=True)),
        }

    def scored(self, arrays: ArrayRecord) -> ArrayRecord:
        """The model the server evaluates for global model `arrays`."""
        return self.downlink.evaluated(arrays) if self.downlink is not None else arrays

    def start_downlink(self, arrays: ArrayRecord) -> None:
        """compression.down: the initial (or resumed) global model is what clients hold."""
        if self.downlink is None:
            return
        if self._downlink_state is not None:
            self.downlink.load_state_dict(self._downlink_state, arrays)
            self._downlink_state = None
        self.downlink.start(arrays)

    # ----- per-client evaluation -----------------------------------------------------------
    def evaluate_messages(
        self, grid: Grid, server_round: int, arrays: ArrayRecord
    ) -> tuple[list[Message], dict[int, int]]:
        """client_eval, when due: the global model to every connected client."""
        if self.client_eval is None or not self.client_eval.due(server_round):
            return [], {}
        nodes = self._refresh(grid)
        messages = self.client_eval.messages(server_round, arrays, nodes)
        return self.outgoing(messages, nodes, arrays), nodes

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        state = self.downlink.state_dict() if self.downlink is not None else {}
        if self.clock is not None:
            state.update(self.clock.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """The clock at once; the downlink's when the first round hands over the model."""
        if self.clock is not None:
            self.clock.load_state_dict({k: v for k, v in state.items() if VirtualClock.owns(k)})
        state = {k: v for k, v in state.items() if not VirtualClock.owns(k)}
        if state and self.downlink is not None:
            self._downlink_state = dict(state)
            self.downlink.held = None

    @staticmethod
    def owns(key: str) -> bool:
        return Downlink.owns(key) or VirtualClock.owns(key)
