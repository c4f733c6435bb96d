"""One exchange on a stand-in Grid: an error the SuperLink writes for a node names that node;
a reply above the size limit is refused unread; replies are pulled as they arrive, under
Flower's own `Strategy.start` too."""

from __future__ import annotations

import time

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    Metadata,
    RecordDict,
)
from flwr.common.constant import ErrorCode
from flwr.server.superlink.linkstate.utils import NODE_UNAVAILABLE_ERROR_REASON
from flwr.serverapp.strategy import Strategy

from client_app import incoming
from fl_system.messages import wire
from server_app.exchange import REPLY_TOO_LARGE, Courier, QuickGrid, exchange
from server_app.strategies.fedavg import FedAvg

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


def _reply_metadata(reply_to: str, src_node_id: int) -> Metadata:
    """The metadata of a reply to message `reply_to`, as pulled from the SuperLink."""
    return Metadata(
        run_id=0,
        message_id=f"r-{reply_to}",
        src_node_id=src_node_id,
        dst_node_id=0,
        reply_to_message_id=reply_to,
        group_id="",
        created_at=0.0,
        ttl=60.0,
        message_type=MessageType.TRAIN,
    )


def _error_from_superlink(reply_to: str) -> Message:
    metadata = _reply_metadata(reply_to, SUPERLINK)
    return Message(metadata=metadata, error=Error(code=0, reason="Node Unavailable"))


def test_an_error_for_an_unavailable_node_is_attributed_to_that_node() -> None:
    grid = _Grid()
    grid.replies = [_error_from_superlink("m1")]
    traffic = exchange(grid, [_sent(4711), _sent(815)], timeout=0.05)
    (reply,) = traffic.replies
    assert reply.has_error() and reply.error.reason == "Node Unavailable"
    assert reply.metadata.src_node_id == 815
    assert reply.metadata.reply_to_message_id == "m1"


def test_node_unavailable_is_said_as_the_node_leaving_not_as_a_missed_heartbeat() -> None:
    """The SuperLink writes the same "node unavailable" error for a node whose key was
    unregistered as for one that died: the reason says what the server knows, nothing more."""
    grid = _Grid()
    metadata = _reply_metadata("m0", SUPERLINK)
    unavailable = Error(ErrorCode.NODE_UNAVAILABLE, NODE_UNAVAILABLE_ERROR_REASON)
    assert "heartbeat" in NODE_UNAVAILABLE_ERROR_REASON  # Flower's reason
    grid.replies = [Message(metadata=metadata, error=unavailable)]
    (reply,) = exchange(grid, [_sent(4711)], timeout=0.05).replies
    assert reply.metadata.src_node_id == 4711
    assert reply.error.code == ErrorCode.NODE_UNAVAILABLE
    assert reply.error.reason == (
        "no reply: the node left the federation before it replied (it stopped, lost its "
        "connection, or its key was unregistered)"
    )


def _reply_to(reply_to: str, node: int, floats: int) -> Message:
    metadata = _reply_metadata(reply_to, node)
    arrays = ArrayRecord({"w": Array(np.ones(floats, np.float32))})
    return Message(content=wire.pack(RecordDict({"arrays": arrays})), metadata=metadata)


def test_a_reply_above_the_size_limit_is_refused_unread_and_still_counted() -> None:
    grid = _Grid()
    grid.replies = [_reply_to("m0", 4711, 1000), _reply_to("m1", 815, 100_000)]
    traffic = exchange(grid, [_sent(4711), _sent(815)], timeout=0.05, max_reply_bytes=50_000)
    small, big = traffic.replies
    assert not small.has_error()
    np.testing.assert_array_equal(small.content.array_records["arrays"]["w"].numpy(), np.ones(1000))
    assert big.has_error() and big.metadata.src_node_id == 815
    assert big.error.code == REPLY_TOO_LARGE
    assert "bytes refused unread: above the limit of 50,000 bytes" in big.error.reason
    assert traffic.bytes_up > 400_000  # both replies travelled


def test_the_courier_keeps_the_nodes_reported_unavailable_until_taken() -> None:
    grid = _Grid()
    unavailable = Error(ErrorCode.NODE_UNAVAILABLE, NODE_UNAVAILABLE_ERROR_REASON)
    grid.replies = [Message(metadata=_reply_metadata("m1", SUPERLINK), error=unavailable)]
    courier = Courier(timeout=0.05, max_reply_ratio=None)
    courier.begin_round(1, ArrayRecord())
    courier.send(grid, [_sent(4711), _sent(815)], "train")
    courier.begin_round(2, ArrayRecord())  # kept across rounds until the registry takes them
    assert courier.take_gone() == {815}
    assert courier.take_gone() == set()


def _clientapp_error(reply_to: str, node: int, raised: Exception) -> Message:
    """A ClientApp's error reply, its reason in Flower's words (flwr-clientapp's format)."""
    reason = str(type(raised)) + ":<'" + str(raised) + "'>"
    error = Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason)
    return Message(metadata=_reply_metadata(reply_to, node), error=error)


def test_a_node_whose_clientapp_lost_its_handshake_is_noted_gone_and_a_failing_one_is_not() -> None:
    """A SuperNode restarted between two looks of the server keeps its id but not its
    ClientApp's context: its next message raises for want of a run config, and the node must
    be handshaked again (else it fails every round to the end). Any other ClientApp error is
    the app failing, which another handshake does not mend."""
    with pytest.raises(RuntimeError) as lost:
        incoming.run_config(Context(1, 4711, {}, RecordDict(), {}))  # a fresh context
    grid = _Grid()
    grid.replies = [
        _clientapp_error("m0", 4711, lost.value),
        _clientapp_error("m1", 815, ValueError("bad data")),
    ]
    courier = Courier(timeout=0.05, max_reply_ratio=None)
    courier.begin_round(1, ArrayRecord())
    courier.send(grid, [_sent(4711), _sent(815)], "train")
    assert courier.take_gone() == {4711}
    courier.note_gone([_clientapp_error("m2", 99, lost.value)])  # Flower's own training loop
    assert courier.take_gone() == {99}


class _SlowGrid(_Grid):
    """Replies come 50 ms after the push; pulls are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.pulls = 0
        self.ready_at = float("inf")

    def push_messages(self, messages: list[Message]) -> list[str]:
        self.ready_at = time.monotonic() + 0.05
        return super().push_messages(messages)

    def pull_messages(self, ids) -> list[Message]:
        self.pulls += 1
        return super().pull_messages(ids) if time.monotonic() >= self.ready_at else []

    def get_node_ids(self) -> list[int]:
        return [4711, 815]


def test_the_quick_grid_returns_replies_as_they_arrive_and_stops_at_the_timeout() -> None:
    """Flower's grid pulls every 3 s: a round whose replies come after 50 ms took 3 s."""
    grid = _SlowGrid()
    grid.replies = [_reply_to("m0", 4711, 10), _reply_to("m1", 815, 10)]
    start = time.monotonic()
    replies = QuickGrid(grid).send_and_receive([_sent(4711), _sent(815)], timeout=60)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0", "m1"]
    assert time.monotonic() - start < 0.5 and grid.pulls >= 2
    grid.replies = [_reply_to("m0", 4711, 10)]  # m1 never answered
    start = time.monotonic()
    replies = QuickGrid(grid).send_and_receive([_sent(4711), _sent(815)], timeout=0.3)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert 0.3 <= time.monotonic() - start < 1.0


def test_the_quick_grid_is_the_grid_it_wraps_for_everything_else() -> None:
    grid = _SlowGrid()
    quick = QuickGrid(grid)
    assert quick.get_node_ids() == [4711, 815]
    assert quick.push_messages([_sent(1)]) == ["m0"]
    grid.replies, grid.ready_at = [_reply_to("m0", 1, 1)], 0.0
    assert [r.metadata.reply_to_message_id for r in quick.pull_messages(["m0"])] == ["m0"]


def test_our_strategies_run_flowers_start_on_the_quick_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = []
    monkeypatch.setattr(Strategy, "start", lambda self, grid, *a, **k: seen.append(grid))
    grid = _SlowGrid()
    FedAvg(num_clients=2).start(grid, ArrayRecord(), num_rounds=1)
    (used,) = seen
    assert isinstance(used, QuickGrid) and used.grid is grid
