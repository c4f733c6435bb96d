"""`secagg=secaggplus`: a round's training exchange run as SecAgg+ through the round's courier.

Setup goes first, as training messages carrying the protocol's configs and the round's config
(`secagg_setup`): each client answers its public keys and what the server weighs it by
(examples, FedDisco's d_k), since a weight must be fixed before masking; the server fixes the
weights (`weigh`, the strategy's own p_k) and key sharing follows (`secagg_keys`). The
strategy's training messages then go with each client's forwarded shares and its weight
(`train`); the survivors are asked for their unmasking shares (`secagg_unmask`). The server
learns the weighted average update and each client's metrics (examples, loss), never a
client's update: every reply of a survivor is handed to the strategy carrying the same model,
the received model plus that average, as Flower's own SecAgg+ workflow hands its strategy the
aggregate in every result. A strategy that averages them (FedAvg and its kin) gets the secure
average back. `sum` runs the same protocol over a sum an add-on needs only in total.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.serverapp import Grid

from fl_system.messages import protocol
from fl_system.privacy.secagg import SecAggSettings
from server_app.exchange import Courier
from server_app.federated.replies import ClientReply
from server_app.rounds import RunFailed
from server_app.secure_aggregation import SecAggFailed, SecAggRound

Weigh = Callable[[list[ClientReply]], np.ndarray]  # the p_k of clients, from their reports


@dataclass
class _Outcome:
    """What one run of the protocol gave: the round, the masked replies of the clients in
    the sum by node, each client's weight (none for a sum: every term is weighed alike), the
    error replies of the collection, and the unmasked average with its summed weight."""

    run: SecAggRound
    masked: dict[int, Message]
    weights: dict[int, float]
    errors: list[Message]
    average: list[np.ndarray]
    weight: float


class SecureExchange:
    """SecAgg+ in place of the plain training exchange."""

    def __init__(self, settings: SecAggSettings) -> None:
        self.settings = settings
        self.columns: dict[str, float] = {}  # the last round's, for its metrics row

    def send(
        self,
        courier: Courier,
        grid: Grid,
        messages: list[Message],
        weigh: Weigh,
        summed: Sequence[str] = (),
    ) -> tuple[list[Message], str | None]:
        """The training replies as the strategy reads them, and why the protocol failed if
        it did (then no reply carries a model: the round keeps its model). The records named
        `summed` are summed beside the update, unweighted; every reply carries their mean,
        so that the strategy summing them over the replies gets their sum."""
        if not messages:
            return [], None
        received = messages[0].content.array_records[protocol.ARRAYS]  # before it is packed
        if any(m.content.array_records.get(protocol.ARRAYS) is not received for m in messages):
            raise RunFailed(
                "secure aggregation sums updates from one model: this round sent several"
            )
        try:
            out = self._protocol(courier, grid, messages, weigh, summed)
        except SecAggFailed as failed:
            return [], str(failed)
        model = _moved(received, out.average[: len(received)])
        replies = list(out.masked.values())
        self.columns = self._columns(out.run, replies, out.weights)
        summed_part = out.average[len(received) :]
        records = _means(replies, summed, summed_part, out.weight) if summed else {}
        for reply in replies:  # the mod's records (Flower's FitRes layout) are left behind
            metrics = reply.content.metric_records[protocol.METRICS]
            reply.content = RecordDict(
                {protocol.METRICS: metrics, protocol.ARRAYS: model, **records}
            )
        return replies + out.errors, None

    def sum(
        self, courier: Courier, grid: Grid, messages: list[Message]
    ) -> tuple[list[np.ndarray], int]:
        """The plain sum of the terms the messages' clients answer (their config names the
        sum), and how many clients it holds; SecAggFailed if the protocol cannot finish."""
        out = self._protocol(courier, grid, messages, None, ())
        most = self.settings.max_weight  # each term was weighed max_weight: r = 1
        return [layer * out.weight * most for layer in out.average], len(out.masked)

    def _protocol(
        self,
        courier: Courier,
        grid: Grid,
        messages: list[Message],
        weigh: Weigh | None,
        summed: Sequence[str],
    ) -> _Outcome:
        """The four stages; SecAggFailed if they cannot finish."""
        run = SecAggRound(self.settings, [m.metadata.dst_node_id for m in messages])
        config = {
            m.metadata.dst_node_id: m.content.config_records[protocol.CONFIG] for m in messages
        }
        setup = self._stage(courier, grid, run.setup(), "secagg_setup", config)
        shares = self._stage(courier, grid, run.share_keys(_configs(setup)), "secagg_keys")
        forwarded = run.collect(_configs(shares))
        weights = _weights(setup, forwarded, weigh) if weigh is not None else {}
        sent = []
        for message in messages:
            node = message.metadata.dst_node_id
            if node in forwarded:
                message.content[RECORD_KEY_CONFIGS] = forwarded[node]
                if weigh is not None:
                    told = {protocol.SECAGG_WEIGHT: weights[node]}
                    if summed:
                        told[protocol.SECURE_RECORDS] = list(summed)
                    message.content[protocol.CONFIG] = ConfigRecord({**config[node], **told})
                sent.append(message)
        trained = courier.send(grid, sent, "train", timeout=self.settings.timeout).replies
        masked = {
            r.metadata.src_node_id: r
            for r in trained
            if not r.has_error() and RECORD_KEY_CONFIGS in r.content.config_records
        }
        asked = run.unmask(
            {n: r.content.config_records[RECORD_KEY_CONFIGS] for n, r in masked.items()}
        )
        average, weight = run.result(_configs(self._stage(courier, grid, asked, "secagg_unmask")))
        errors = [r for r in trained if r.has_error()]
        return _Outcome(run, {n: masked[n] for n in run.active}, weights, errors, average, weight)

    def _columns(
        self, run: SecAggRound, replies: list[Message], weights: Mapping[int, float]
    ) -> dict[str, float]:
        """The round's SecAgg+ columns: who was summed and dropped, each summed client's
        weight in the average, and how far the average can be from the plain one at most,
        from what the server knows (the weights it fixed, and |w v| <= clipping_range)."""
        s = self.settings
        summed = {r.metadata.src_node_id: r for r in replies}
        used = [weights[n] for n in summed]
        positive = [r for r in s.weights(used) if r > 0]
        total = sum(used)
        partition = {
            n: int(r.content.metric_records[protocol.METRICS][protocol.PARTITION_ID])
            for n, r in summed.items()
        }
        return {
            "secagg_summed": len(run.active),
            "secagg_dropped": len(run.sharers - run.active),
            "secagg_error_bound": s.average_error_bound(used, s.clipping_range / min(positive)),
            **{f"weight_{partition[n]}": weights[n] / total for n in summed},
        }

    def _stage(
        self,
        courier: Courier,
        grid: Grid,
        asked: Mapping[int, ConfigRecord],
        label: str,
        config: Mapping[int, ConfigRecord] | None = None,
    ) -> dict[int, RecordDict]:
        """One protocol stage: its configs (and the round's config) to each node, the
        content each answered with its configs."""
        messages = []
        for node, cfg in asked.items():
            content = RecordDict({RECORD_KEY_CONFIGS: cfg})
            if config is not None:
                content[protocol.CONFIG] = config[node]
            messages.append(Message(content, node, MessageType.TRAIN))
        replies = courier.send(grid, messages, label, timeout=self.settings.timeout).replies
        return {
            r.metadata.src_node_id: r.content
            for r in replies
            if not r.has_error() and RECORD_KEY_CONFIGS in r.content.config_records
        }


def _configs(contents: Mapping[int, RecordDict]) -> dict[int, ConfigRecord]:
    return {n: c.config_records[RECORD_KEY_CONFIGS] for n, c in contents.items()}


def _weights(
    setup: Mapping[int, RecordDict], clients: Mapping[int, object], weigh: Weigh
) -> dict[int, float]:
    """Each client's weight w_k = p_k * (the clients' examples), p_k the strategy's from what
    the clients reported at setup: on the examples' scale, which max_weight is set for."""
    reports = [
        ClientReply(
            node_id=n,
            partition_id=int(setup[n].metric_records[protocol.METRICS][protocol.PARTITION_ID]),
            num_examples=int(setup[n].metric_records[protocol.METRICS][protocol.NUM_EXAMPLES]),
            arrays=[],
            metrics=setup[n].metric_records[protocol.METRICS],
            content=RecordDict(),
        )
        for n in sorted(clients)
    ]
    p = weigh(reports)
    examples = sum(r.num_examples for r in reports)
    return {r.node_id: float(pk) * examples for r, pk in zip(reports, p, strict=True)}


def _means(
    replies: list[Message], names: Sequence[str], summed: list[np.ndarray], weight: float
) -> dict[str, ArrayRecord]:
    """The records `names` as their means over the replies, from the vectors that followed
    the update (in that order, each record's layers as the replies' layout names them): the
    secure average of x / r times the summed r is the plain sum of x."""
    layout = replies[0].content.config_records[protocol.SECURE_LAYOUT]
    arrays = iter(summed)
    means = {}
    for name in names:
        layers = cast(list[str], layout[name])
        means[name] = ArrayRecord(
            {layer: Array(next(arrays) * weight / len(replies)) for layer in layers}
        )
    return means


def _moved(received: ArrayRecord, average: list[np.ndarray]) -> ArrayRecord:
    """The received model plus the average update (its float layers; counters kept)."""
    out = {}
    for (name, array), update in zip(received.items(), average, strict=True):
        value = array.numpy()
        if np.issubdtype(value.dtype, np.floating):
            value = (value.astype(np.float64) + update).astype(value.dtype)
        out[name] = Array(value)
    return ArrayRecord(out)
