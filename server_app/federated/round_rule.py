"""The shape of a round: what a strategy sends, in which exchanges, and how it turns the
replies into the round's result. `round(plan)` is a generator (`server_app.rounds`): it yields
exchanges and returns the result; the default is the add-ons' exchanges, then one training
exchange, then `finish_round`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fl_system.messages import protocol
from server_app.federated.replies import ClientReply, arrays_like, reply_mean
from server_app.rounds import Exchange, RoundPlan, RoundResult, RoundSteps


class RoundRule:
    """A strategy's round: its messages, exchanges and aggregate (`aggregate` is the one
    method every algorithm implements)."""

    def on_handshake(self, partition_id: int, metrics: MetricRecord) -> None:
        """What a node told the server when it joined; the add-ons take note."""
        for addon in self.addons:
            addon.on_join(partition_id, metrics)

    def excluded(self) -> frozenset[int]:
        """Partitions the driver must not sample any more (TACO's expelled freeloaders)."""
        return frozenset()

    def choose(self, server_round: int, available: Sequence[int]) -> list[int] | None:
        """The partitions to train this round, from the connected ones; None leaves the
        choice to the driver's seeded sampling (FedCat picks its own devices)."""
        return None

    def round(self, plan: RoundPlan) -> RoundSteps:
        """The add-ons' exchanges, then one training exchange, then the aggregate."""
        for addon in self.addons:
            plan = yield from addon.prepare(plan)
        replies = yield Exchange(self.train_messages(plan), label="train")
        return self.finish_round(plan, replies)

    def train_messages(self, plan: RoundPlan) -> list[Message]:
        """One training message per node of the plan."""
        return [
            Message(
                content=self.node_content(plan, partition_id),
                dst_node_id=node_id,
                message_type=MessageType.TRAIN,
            )
            for node_id, partition_id in plan.nodes.items()
        ]

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        """What one node receives: the global model and the round's config, with the add-ons'
        values and this partition's own settings."""
        extra = {k: v for addon in self.addons for k, v in addon.shared_config().items()}
        extra.update(plan.node_config.get(partition_id, {}))
        config = ConfigRecord({**plan.config, **extra}) if extra else plan.config
        return RecordDict({protocol.ARRAYS: plan.arrays, protocol.CONFIG: config})

    def finish_round(self, plan: RoundPlan, replies: Sequence[Message]) -> RoundResult:
        """Validate the training replies and aggregate the usable ones."""
        ok, norms, failures = self.usable(plan, replies)
        failures = [*plan.failures, *failures]
        if not ok:
            return RoundResult(None, dict(plan.metrics), failures, 0)
        weights = self.aggregation_weights(plan, ok)
        new_arrays = self.aggregate(plan, ok, weights)
        seconds = [
            float(r.metrics[protocol.COMPUTE_SECONDS])
            for r in ok
            if protocol.COMPUTE_SECONDS in r.metrics
        ]
        metrics = {
            "train_loss": reply_mean(ok, protocol.TRAIN_LOSS),
            # local training time: the slowest client sets the round's pace (TACO spec 5)
            "compute_seconds_max": max(seconds, default=float("nan")),
            "compute_seconds_total": sum(seconds),
            # the largest and median update (reply minus the model sent): what clipping bounds
            "update_norm_max": max(norms),
            "update_norm_median": float(np.median(norms)),
            **self.weight_columns(ok, weights),
            **plan.metrics,
            **self.round_metrics(plan, ok, weights),
        }
        return RoundResult(arrays_like(plan.arrays, new_arrays), metrics, failures, len(ok))

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        """The new global model's layers from this round's usable replies and their p_k."""
        raise NotImplementedError

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        """Algorithm-specific scalars for this round's metrics row (none by default)."""
        return {}

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """The add-ons' entries for summary.json."""
        return {k: v for addon in self.addons for k, v in addon.summarize(rows).items()}
