"""Reply messages as a SuperNode would send them, without a network (Flower's test style)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

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

from fl_system.messages import protocol
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import Exchange, RoundPlan, RoundResult


def reply(
    node_id: int,
    arrays: list[np.ndarray] | Mapping[str, np.ndarray],
    *,
    partition_id: int,
    num_examples: int,
    train_loss: float = 0.0,
    extra: RecordDict | None = None,
    metrics: Mapping[str, float] | None = None,
) -> Message:
    """A successful train reply from `node_id` carrying `arrays`, the standard metrics and
    `metrics`. A list of arrays takes the layer names of the model it answers when it reaches
    `aggregate` or `drive` (as a ClientApp's state dict would); a mapping keeps its names."""
    sent = Message(
        RecordDict({protocol.CONFIG: ConfigRecord({protocol.SERVER_ROUND: 1})}),
        dst_node_id=node_id,
        message_type=MessageType.TRAIN,
    )
    content = RecordDict(
        {
            protocol.ARRAYS: (
                ArrayRecord({k: Array(v) for k, v in arrays.items()})
                if isinstance(arrays, Mapping)
                else ArrayRecord.from_numpy_ndarrays(arrays)
            ),
            protocol.METRICS: MetricRecord(
                {
                    protocol.PARTITION_ID: partition_id,
                    protocol.NUM_EXAMPLES: num_examples,
                    protocol.TRAIN_LOSS: train_loss,
                    **(metrics or {}),
                }
            ),
        }
    )
    for name, record in (extra or RecordDict()).items():
        content[name] = record
    return Message(content, reply_to=sent)


def plan(
    nodes: Mapping[int, int] | None = None, arrays: ArrayRecord | None = None, rnd: int = 1
) -> RoundPlan:
    """A round that sends `arrays` (default: none) to `nodes` (node id -> partition id)."""
    return RoundPlan(
        round=rnd,
        arrays=arrays if arrays is not None else ArrayRecord(),
        config=ConfigRecord({protocol.SERVER_ROUND: rnd}),
        nodes=dict(nodes or {}),
    )


def aggregate(
    strategy: FederatedStrategy,
    replies: list[Message],
    *,
    arrays: ArrayRecord | None = None,
    rnd: int = 1,
) -> RoundResult:
    """The strategy's result for training `replies` of a round that sent `arrays`."""
    nodes = {m.metadata.src_node_id: 0 for m in replies}
    return strategy.finish_round(plan(nodes, arrays, rnd), _named(replies, arrays))


def _named(replies: list[Message], model: ArrayRecord | None) -> list[Message]:
    """Replies whose arrays are positional ('0', '1', ...) take the layer names of `model`."""
    if not model:
        return replies
    for m in replies:
        if not m.has_content():
            continue
        record = m.content.array_records.get(protocol.ARRAYS)
        positional = [str(i) for i in range(len(model))]
        if record is not None and list(record.keys()) == positional:
            m.content[protocol.ARRAYS] = ArrayRecord(
                {name: record[str(i)] for i, name in enumerate(model.keys())}
            )
    return replies


def drive(
    strategy: FederatedStrategy,
    round_plan: RoundPlan,
    answer: Callable[[Exchange], list[Message]],
) -> tuple[RoundResult, list[Exchange]]:
    """Run a whole round, each exchange answered by `answer`; the result and the exchanges."""
    steps = strategy.round(round_plan)
    sent: list[Exchange] = []
    try:
        step = next(steps)
        while True:
            sent.append(step)
            step = steps.send(_named(answer(step), round_plan.arrays))
    except StopIteration as done:
        return done.value, sent
