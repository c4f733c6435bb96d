"""One exchange on a stand-in Grid: an error the SuperLink writes for a node names that node."""

from __future__ import annotations

from flwr.app import ConfigRecord, Error, Message, MessageType, Metadata, RecordDict

from server_app.exchange import exchange

SUPERLINK = 1  # Flower's own node id for the SuperLink


class _Grid:
    """Pushes get ids m0, m1, ...; every pull returns the prepared replies."""

    def __init__(self) -> None:
        self.replies: list[Message] = []

    def push_messages(self, messages: list[Message]) -> list[str]:
        return [f"m{i}" for i in range(len(messages))]

    def pull_messages(self, ids) -> list[Message]:
        out, self.replies = self.replies, []
        return out


def _sent(node: int) -> Message:
    content = RecordDict({"config": ConfigRecord({"server-round": 1})})
    return Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN)


def _error_from_superlink(reply_to: str) -> Message:
    metadata = Metadata(
        run_id=0,
        message_id=f"e-{reply_to}",
        src_node_id=SUPERLINK,
        dst_node_id=0,
        reply_to_message_id=reply_to,
        group_id="",
        created_at=0.0,
        ttl=60.0,
        message_type=MessageType.TRAIN,
    )
    return Message(metadata=metadata, error=Error(code=0, reason="Node Unavailable"))


def test_an_error_for_an_unavailable_node_is_attributed_to_that_node() -> None:
    grid = _Grid()
    grid.replies = [_error_from_superlink("m1")]
    traffic = exchange(grid, [_sent(4711), _sent(815)], timeout=0.05)
    (reply,) = traffic.replies
    assert reply.has_error() and reply.error.reason == "Node Unavailable"
    assert reply.metadata.src_node_id == 815
    assert reply.metadata.reply_to_message_id == "m1"
