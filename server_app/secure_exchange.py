"""`secagg=secaggplus`: a round's training exchange run as SecAgg+ through the round's courier.

Setup and key sharing go first, as training messages carrying only the protocol's configs
(their bytes counted as `secagg_setup` and `secagg_keys`); the strategy's training messages
follow with each client's forwarded shares (`train`); the survivors are then asked for their
unmasking shares (`secagg_unmask`). The server learns the weighted average update and each
client's metrics (examples, loss), never a client's update: every reply of a survivor is
handed to the strategy carrying the same model, the received model plus that average, as
Flower's own SecAgg+ workflow hands its strategy the aggregate in every result. A strategy
that averages them (FedAvg and its kin) gets the secure average back.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.serverapp import Grid

from fl_system.messages import protocol
from fl_system.privacy.secagg import SecAggSettings
from server_app.exchange import Courier
from server_app.rounds import RunFailed
from server_app.secure_aggregation import SecAggFailed, SecAggRound


class SecureExchange:
    """SecAgg+ in place of the plain training exchange."""

    def __init__(self, settings: SecAggSettings) -> None:
        self.settings = settings
        self.columns: dict[str, float] = {}  # the last round's, for its metrics row

    def send(
        self, courier: Courier, grid: Grid, messages: list[Message]
    ) -> tuple[list[Message], str | None]:
        """The training replies as the strategy reads them, and why the protocol failed if
        it did (then no reply carries a model: the round keeps its model)."""
        if not messages:
            return [], None
        nodes = [m.metadata.dst_node_id for m in messages]
        received = messages[0].content.array_records[protocol.ARRAYS]  # before it is packed
        if any(m.content.array_records.get(protocol.ARRAYS) is not received for m in messages):
            raise RunFailed(
                "secure aggregation sums updates from one model: this round sent several"
            )
        try:
            run = SecAggRound(self.settings, nodes)
            keys = self._stage(courier, grid, run.setup(), "secagg_setup")
            shares = self._stage(courier, grid, run.share_keys(keys), "secagg_keys")
            forwarded = run.collect(shares)
            for message in messages:
                node = message.metadata.dst_node_id
                if node in forwarded:
                    message.content[RECORD_KEY_CONFIGS] = forwarded[node]
            sent = [m for m in messages if m.metadata.dst_node_id in forwarded]
            trained = courier.send(grid, sent, "train", timeout=self.settings.timeout).replies
            masked = {
                r.metadata.src_node_id: r
                for r in trained
                if not r.has_error() and RECORD_KEY_CONFIGS in r.content.config_records
            }
            vectors = {n: r.content.config_records[RECORD_KEY_CONFIGS] for n, r in masked.items()}
            asked = run.unmask(vectors)
            average, _ = run.result(self._stage(courier, grid, asked, "secagg_unmask"))
        except SecAggFailed as failed:
            return [], str(failed)
        model = _moved(received, average)
        replies = [r for n, r in masked.items() if n in run.active]
        self.columns = self._columns(run, replies)
        for reply in replies:
            del reply.content[RECORD_KEY_CONFIGS]
            reply.content[protocol.ARRAYS] = model
        return replies + [r for r in trained if r.has_error()], None

    def _columns(self, run: SecAggRound, replies: list[Message]) -> dict[str, float]:
        """The round's SecAgg+ columns: who was summed and dropped, and how far the average
        can be from the plain one at most, from what the server knows (the example counts
        the clients report, and |w v| <= clipping_range)."""
        s = self.settings
        weights = [
            float(r.content.metric_records[protocol.METRICS][protocol.NUM_EXAMPLES])
            for r in replies
        ]
        largest = s.clipping_range / min(s.weights(weights))
        return {
            "secagg_summed": len(run.active),
            "secagg_dropped": len(run.sharers - run.active),
            "secagg_error_bound": s.average_error_bound(weights, largest),
        }

    def _stage(
        self, courier: Courier, grid: Grid, asked: Mapping[int, ConfigRecord], label: str
    ) -> dict[int, ConfigRecord]:
        """One protocol stage: its configs to each node, the configs each answered."""
        messages = [
            Message(RecordDict({RECORD_KEY_CONFIGS: cfg}), node, MessageType.TRAIN)
            for node, cfg in asked.items()
        ]
        replies = courier.send(grid, messages, label, timeout=self.settings.timeout).replies
        return {
            r.metadata.src_node_id: r.content.config_records[RECORD_KEY_CONFIGS]
            for r in replies
            if not r.has_error() and RECORD_KEY_CONFIGS in r.content.config_records
        }


def _moved(received: ArrayRecord, average: list[np.ndarray]) -> ArrayRecord:
    """The received model plus the average update (its float layers; counters kept)."""
    out = {}
    for (name, array), update in zip(received.items(), average, strict=True):
        value = array.numpy()
        if np.issubdtype(value.dtype, np.floating):
            value = (value.astype(np.float64) + update).astype(value.dtype)
        out[name] = Array(value)
    return ArrayRecord(out)
