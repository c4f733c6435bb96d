"""Replies unpacked: usable ones with their numbers, the others with the reason."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from fl_system import protocol
from server_app.rounds import ClientFailure


@dataclass(frozen=True)
class ClientReply:
    """One successful training reply, unpacked."""

    node_id: int
    partition_id: int
    num_examples: int
    arrays: list[np.ndarray]
    metrics: MetricRecord
    content: RecordDict


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
        if protocol.REJECTED in content.config_records:
            reason = str(content.config_records[protocol.REJECTED][protocol.REASON])
            failed.append(ClientFailure(node, reason))
            continue
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
