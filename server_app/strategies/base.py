"""The base every fl_system strategy builds on.

Flower's built-in strategies send one identical message to every sampled node and reject a
reply that carries more than one ArrayRecord/MetricRecord. Our algorithms need per-node
content (control variates, step counts) and send extra records (statistics, Fisher vectors),
so this base builds one message per node, accepts extra records, separates failed replies
instead of failing the round, and exposes `state_dict()` for checkpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

if TYPE_CHECKING:
    from server_app.strategies.feddisco import DiscoWeighting

from fl_system import protocol
from fl_system.aggregation import normalized

log = logging.getLogger(__name__)

StrategyState = dict[str, np.ndarray]


@dataclass(frozen=True)
class ClientReply:
    """One successful training reply, unpacked."""

    node_id: int
    partition_id: int
    num_examples: int
    arrays: list[np.ndarray]
    metrics: MetricRecord
    content: RecordDict


@dataclass(frozen=True)
class ClientFailure:
    """A reply that could not be used, and why."""

    node_id: int
    reason: str


def unpack_replies(replies: Iterable[Message]) -> tuple[list[ClientReply], list[ClientFailure]]:
    """Split replies into usable ones (sorted by partition id) and failures with a reason."""
    ok: list[ClientReply] = []
    failed: list[ClientFailure] = []
    for msg in replies:
        node = msg.metadata.src_node_id
        if msg.has_error():
            failed.append(ClientFailure(node, f"client error: {msg.error.reason}"))
            continue
        content = msg.content
        metrics = content.metric_records.get(protocol.METRICS)
        arrays = content.array_records.get(protocol.ARRAYS)
        missing = [
            name
            for name, present in (
                (f"ArrayRecord '{protocol.ARRAYS}'", arrays is not None),
                (f"MetricRecord '{protocol.METRICS}'", metrics is not None),
            )
            if not present
        ]
        if not missing:
            missing = [
                f"metric '{key}'"
                for key in (protocol.NUM_EXAMPLES, protocol.PARTITION_ID)
                if key not in metrics
            ]
        if missing:
            failed.append(ClientFailure(node, "reply lacks " + ", ".join(missing)))
            continue
        layers = arrays.to_numpy_ndarrays()
        broken = [name for name, a in zip(arrays, layers, strict=True) if not np.isfinite(a).all()]
        if broken:
            failed.append(
                ClientFailure(
                    node,
                    f"local model has NaN or inf in {len(broken)} of {len(layers)} layers, "
                    f"first '{broken[0]}' (local training diverged: try a lower train.lr)",
                )
            )
            continue
        ok.append(
            ClientReply(
                node_id=node,
                partition_id=int(metrics[protocol.PARTITION_ID]),
                num_examples=int(metrics[protocol.NUM_EXAMPLES]),
                arrays=layers,
                metrics=metrics,
                content=content,
            )
        )
    ok.sort(key=lambda r: r.partition_id)
    return ok, failed


def arrays_like(template: ArrayRecord, values: list[np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with the template's keys (layer names) and the given values."""
    if not template:
        return ArrayRecord.from_numpy_ndarrays(values)
    return ArrayRecord({k: Array(v) for k, v in zip(template.keys(), values, strict=True)})


class FederatedStrategy(Strategy):
    """Per-node messages, lenient reply validation, checkpointable state.

    Subclasses implement `aggregate` (and may override `node_content` to send each node
    something of its own). The round driver calls `train_messages` with the nodes it
    sampled; Flower's own `Strategy.start` goes through `configure_train`, which addresses
    every connected node.
    """

    def __init__(self, *, disco: DiscoWeighting | None = None) -> None:
        self.disco = disco if disco is not None and disco.enabled else None
        self.global_arrays: ArrayRecord = ArrayRecord()
        self.last_failures: list[ClientFailure] = []
        self.last_weights: dict[int, float] = {}  # partition id -> p_k of the last average

    def on_handshake(self, partition_id: int, metrics: MetricRecord) -> None:
        """What a node told the server when it joined (label counts for FedDisco's target)."""
        if self.disco is not None and protocol.DISCO_COUNTS in metrics:
            self.disco.note_counts(partition_id, list(metrics[protocol.DISCO_COUNTS]))

    # ----- sending -------------------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        nodes = {node_id: None for node_id in sorted(grid.get_node_ids())}
        return self.train_messages(server_round, arrays, config, nodes)

    def train_messages(
        self,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        nodes: Mapping[int, int | None],
    ) -> list[Message]:
        """One message per node id; `nodes` maps node id to partition id (None if unknown)."""
        self.global_arrays = arrays
        return [
            Message(
                content=self.node_content(server_round, arrays, config, partition_id),
                dst_node_id=node_id,
                message_type=MessageType.TRAIN,
            )
            for node_id, partition_id in nodes.items()
        ]

    def node_content(
        self,
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        partition_id: int | None,
    ) -> RecordDict:
        """What one node receives; the default is the global model and the round config."""
        target = self.disco.global_target() if self.disco is not None else None
        if target is not None:
            config = ConfigRecord({**config, protocol.DISCO_TARGET: target})
        return RecordDict({protocol.ARRAYS: arrays, protocol.CONFIG: config})

    # ----- receiving -----------------------------------------------------------------------
    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        unpacked, self.last_failures = unpack_replies(replies)
        ok = []
        for reply in unpacked:
            problem = self.reject(reply)
            if problem is None:
                ok.append(reply)
            else:
                self.last_failures.append(ClientFailure(reply.node_id, problem))
        for failure in self.last_failures:
            log.warning(
                "round %d: node %d dropped: %s", server_round, failure.node_id, failure.reason
            )
        if not ok:
            return None, None
        self.last_weights = {}
        new_arrays = self.aggregate(server_round, ok)
        metrics = MetricRecord(
            {
                "train_loss": _weighted_mean(ok, protocol.TRAIN_LOSS),
                **{f"weight_{pid}": w for pid, w in sorted(self.last_weights.items())},
                **self.round_metrics(server_round, ok),
            }
        )
        return arrays_like(self.global_arrays, new_arrays), metrics

    def reject(self, reply: ClientReply) -> str | None:
        """Why this algorithm cannot use a well-formed reply (None: it can)."""
        return None

    def aggregate(self, server_round: int, replies: list[ClientReply]) -> list[np.ndarray]:
        """The new global model's layers from this round's usable replies."""
        raise NotImplementedError

    def base_weights(self, replies: list[ClientReply]) -> list[float]:
        """The algorithm's own averaging weights (unnormalised): data size by default."""
        return [float(r.num_examples) for r in replies]

    def aggregation_weights(self, server_round: int, replies: list[ClientReply]) -> np.ndarray:
        """p_k, summing to one, for averaging client models this round.

        Every strategy that averages client models uses this, so a reweighting such as
        FedDisco's composes with all of them. The weights also go to metrics.csv.
        """
        if self.disco is not None:
            p = self.disco.weights(replies)
        else:
            p = normalized(self.base_weights(replies))
        self.last_weights = {r.partition_id: float(w) for r, w in zip(replies, p, strict=True)}
        return p

    def round_metrics(self, server_round: int, replies: list[ClientReply]) -> dict[str, float]:
        """Algorithm-specific scalars for this round's metrics row (none by default)."""
        return {}

    # ----- evaluation is central (done by the driver), not federated -------------------------
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        log.info("strategy %s", type(self).__name__)

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        """Server-side state that must survive a restart (FedDisco's cache, if enabled).

        Strategies with state of their own extend this dict: `{**super().state_dict(), ...}`.
        """
        return self.disco.state_dict() if self.disco is not None else {}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore `state_dict()`; subclasses pop their own keys and pass the rest up."""
        disco = {k: v for k, v in state.items() if k.startswith("disco/")}
        unknown = sorted(set(state) - set(disco))
        if unknown:
            raise ValueError(f"{type(self).__name__} does not keep state {unknown}")
        if self.disco is not None:
            self.disco.load_state_dict(disco)


def _weighted_mean(replies: list[ClientReply], key: str) -> float:
    pairs = [(r.num_examples, float(r.metrics[key])) for r in replies if key in r.metrics]
    total = sum(n for n, _ in pairs)
    return sum(n * v for n, v in pairs) / total if total else float("nan")
