"""A reply the server will not use, marked so in its content: the strategy's screening
(`server_app.strategies.replies.unpack_replies`) counts it as a failure with the reason."""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict

from fl_system.messages import protocol


def rejected(content: RecordDict, reason: str) -> RecordDict:
    """The reply's metrics, and why it cannot be used."""
    out = RecordDict({protocol.REJECTED: ConfigRecord({protocol.REASON: reason})})
    if protocol.METRICS in content.metric_records:
        out[protocol.METRICS] = content.metric_records[protocol.METRICS]
    return out
