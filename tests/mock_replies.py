"""Reply messages as a SuperNode would send them, without a network (Flower's test style)."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fl_system import protocol


def reply(
    node_id: int,
    arrays: list[np.ndarray],
    *,
    partition_id: int,
    num_examples: int,
    train_loss: float = 0.0,
    extra: RecordDict | None = None,
) -> Message:
    """A successful train reply from `node_id` carrying `arrays` and the standard metrics."""
    sent = Message(
        RecordDict({protocol.CONFIG: ConfigRecord({protocol.SERVER_ROUND: 1})}),
        dst_node_id=node_id,
        message_type=MessageType.TRAIN,
    )
    content = RecordDict(
        {
            protocol.ARRAYS: ArrayRecord.from_numpy_ndarrays(arrays),
            protocol.METRICS: MetricRecord(
                {
                    protocol.PARTITION_ID: partition_id,
                    protocol.NUM_EXAMPLES: num_examples,
                    protocol.TRAIN_LOSS: train_loss,
                }
            ),
        }
    )
    for name, record in (extra or RecordDict()).items():
        content[name] = record
    return Message(content, reply_to=sent)
