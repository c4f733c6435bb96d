"""Send messages and collect replies: packed for the wire, counted, and polled quickly.

Models cross the wire packed (`fl_system.messages.wire`): messages are packed just before the push
and replies unpacked on arrival, so strategies see whole ArrayRecords on both sides. Bytes are
counted on the packed messages, i.e. what really travels. A reply larger than
`max_reply_bytes` is refused unread (not unpacked): it becomes an error reply with the sizes.

Flower's Grid sleeps 3 s between pulls; on small models that idles the server for most of a
round. Poll quickly at first and back off, but never to more than what pulling costs allows:
the wait is capped at PULL_COST_FACTOR times the mean time of a pull, between
FIRST_POLL_SECONDS and POLL_SECONDS. In simulation a pull is an in-process call (well under
a millisecond), so the last reply is noticed within ~10 ms; over the SuperLink's API a pull
takes milliseconds and the cap settles near 0.2 s, keeping the polling's CPU small. A reply
whose sender dies while uploading it becomes an error once the sender is offline
(`flwr_hooks.abandon_replies_of_dead_senders`), instead of holding the pull for minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flwr.app import ArrayRecord, Error, Message, Metadata
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from fl_system.flower import flwr_hooks, object_pulls
from fl_system.flower.flwr_hooks import WireSize
from fl_system.messages import protocol, wire

if TYPE_CHECKING:
    from flwr.supercore.run import Run

log = logging.getLogger(__name__)

FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.2  # the slowest polling interval
PULL_COST_FACTOR = 50  # wait at most this many pulls' time: polling costs <= ~2% of a core
REPLY_FRAMING_BYTES = 1 << 20  # a reply's metrics, extra records and Flower's framing


@dataclass(frozen=True)
class Traffic:
    """The replies of one exchange and the bytes it moved each way, in all and by node."""

    replies: list[Message]
    bytes_down: int
    bytes_up: int
    down_by_node: dict[int, WireSize] = field(default_factory=dict)
    up_by_node: dict[int, WireSize] = field(default_factory=dict)


REPLY_TOO_LARGE = 413  # Error.code of a reply refused for its size
# What the SuperLink's "node unavailable" means: the server cannot tell which of these it was
NODE_LEFT = (
    "no reply: the node left the federation before it replied (it stopped, lost its "
    "connection, or its key was unregistered)"
)


def exchange(
    grid: Grid,
    messages: Iterable[Message],
    *,
    timeout: float,
    max_reply_bytes: int | None = None,
    pack: bool = True,
) -> Traffic:
    """Push `messages`; return the replies that arrived within `timeout` seconds.

    `pack=False` sends plain records (what Flower's client mods, e.g. its differential
    privacy clipping, require); clients answer in the format they were sent."""
    messages = list(messages)
    originals = [m.content for m in messages]
    if pack:
        for message, packed in zip(messages, wire.pack_each(originals), strict=True):
            message.content = packed
    sizes = flwr_hooks.wire_sizes(messages)
    down_by_node = {m.metadata.dst_node_id: s for m, s in zip(messages, sizes, strict=True)}
    try:
        replies, up_by_node = _push_and_pull(grid, messages, timeout, max_reply_bytes)
    finally:
        for message, content in zip(messages, originals, strict=True):
            message.content = content  # the caller keeps seeing what it built
    bytes_up = sum(s.whole for s in up_by_node.values())
    return Traffic(replies, sum(s.whole for s in sizes), bytes_up, down_by_node, up_by_node)


def _push_and_pull(
    grid: Grid, messages: list[Message], timeout: float, max_reply_bytes: int | None
) -> tuple[list[Message], dict[int, WireSize]]:
    """The replies and their bytes by sender; each is counted and unpacked as it arrives, not
    at the end."""
    ids = list(grid.push_messages(messages))
    sent_to = {mid: m.metadata.dst_node_id for mid, m in zip(ids, messages, strict=True)}
    replies: list[Message] = []
    up_by_node: dict[int, WireSize] = {}
    for got in arrivals(grid, ids, timeout):
        for reply in (_attributed(r, sent_to) for r in got):
            if not reply.has_error():
                size = flwr_hooks.wire_sizes([reply])[0]
                up_by_node[reply.metadata.src_node_id] = size
                if max_reply_bytes is not None and size.whole > max_reply_bytes:
                    reply = _refused(reply, size.whole, max_reply_bytes)
                else:
                    reply.content = wire.unpack(reply.content)
            replies.append(reply)
    return replies, up_by_node


def arrivals(grid: Grid, message_ids: Iterable[str], timeout: float) -> Iterator[list[Message]]:
    """The replies to `message_ids` as they arrive, for at most `timeout` seconds: pulled at
    once, then after waits that double from FIRST_POLL_SECONDS up to what `poll_wait` allows.

    A reply whose sender dies while uploading it becomes an error once the sender is offline
    (`flwr_hooks.abandon_replies_of_dead_senders`)."""
    flwr_hooks.abandon_replies_of_dead_senders(lambda node: node in set(grid.get_node_ids()))
    object_pulls.retry_sooner("serverapp")
    pending = set(message_ids)
    deadline = time.monotonic() + timeout
    wait, pulls, pulling = FIRST_POLL_SECONDS, 0, 0.0
    while pending:
        start = time.monotonic()
        got = list(grid.pull_messages(pending))
        pulls, pulling = pulls + 1, pulling + time.monotonic() - start
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if got:
            yield got
        if not pending or time.monotonic() >= deadline:
            return
        time.sleep(wait)
        wait = poll_wait(wait, pulling / pulls)


class QuickGrid(Grid):
    """`grid`, whose `send_and_receive` pulls replies as `arrivals` does (Flower's grids wait
    3 s between pulls, most of a round on a small model). Our strategies run Flower's own
    `Strategy.start` on it; everything else is `grid`'s.

    Parameters
    ----------
    grid : Grid
        The grid the ServerApp was given.
    """

    def __init__(self, grid: Grid) -> None:
        self.grid = grid

    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        ids = list(self.grid.push_messages(messages))
        limit = float("inf") if timeout is None else timeout
        return [reply for got in arrivals(self.grid, ids, limit) for reply in got]


def _refused(reply: Message, size: int, limit: int) -> Message:
    """An error reply in place of one too large to read."""
    reason = (
        f"reply of {size:,} bytes refused unread: above the limit of {limit:,} bytes "
        "(aggregation.max_reply_ratio x the model's size)"
    )
    return Message(metadata=_copy(reply.metadata), error=Error(REPLY_TOO_LARGE, reason))


def _attributed(reply: Message, sent_to: dict[str, int]) -> Message:
    """An error the SuperLink wrote for a node (it was unavailable, or gone) comes from the
    SuperLink's own id: name the node the message was sent to instead, so logs and failure
    counts speak of the node that did not answer."""
    node = sent_to.get(reply.metadata.reply_to_message_id)
    if not reply.has_error() or node is None or reply.metadata.src_node_id == node:
        return reply
    error = reply.error
    if error.code == ErrorCode.NODE_UNAVAILABLE:  # Flower's reason says "missed a heartbeat"
        error = Error(error.code, NODE_LEFT)  # even for a node whose key was unregistered
    return Message(metadata=_copy(reply.metadata, src_node_id=node), error=error)


def _copy(md: Metadata, **changes: int) -> Metadata:
    """A copy of `md`, with `changes` (an error reply's message needs its own metadata)."""
    fields = {
        "run_id": md.run_id,
        "message_id": md.message_id,
        "src_node_id": md.src_node_id,
        "dst_node_id": md.dst_node_id,
        "reply_to_message_id": md.reply_to_message_id,
        "group_id": md.group_id,
        "created_at": md.created_at,
        "ttl": md.ttl,
        "message_type": md.message_type,
    }
    return Metadata(**{**fields, **changes})


def poll_wait(previous: float, pull_seconds: float) -> float:
    """The next wait: double the previous one, capped by what a pull costs."""
    cap = min(POLL_SECONDS, max(FIRST_POLL_SECONDS, PULL_COST_FACTOR * pull_seconds))
    return min(previous * 2, cap)


@dataclass
class Tally:
    """What the exchanges of one label moved and took in a round."""

    bytes_up: int = 0
    bytes_down: int = 0
    seconds: float = 0.0


@dataclass
class NodeMessages:
    """The content bytes of the messages one node received and sent in a round (the virtual
    clock charges each its bytes and a latency; content alone, so that identical runs have
    identical clocks)."""

    down: list[int] = field(default_factory=list)
    up: list[int] = field(default_factory=list)


class Courier:
    """Sends a round's exchanges under one deadline and keeps what each label moved.

    A strategy sends the exchanges it runs before training (FedGSNR's statistics query)
    through its courier; fl_system's driver sends the training exchange through the same one,
    so a round's bytes, seconds and unanswered messages are counted in one place. Under
    Flower's own `Strategy.start` the training exchange is Flower's, and only the others are
    counted here.
    """

    def __init__(self, *, timeout: float, max_reply_ratio: float | None, pack: bool = True):
        self.timeout = float(timeout)
        self.max_reply_ratio = max_reply_ratio
        self.pack = pack
        self.round = 0
        self.deadline: float | None = None
        self.max_reply_bytes: int | None = None
        self.tallies: dict[str, Tally] = {}
        self.node_messages: dict[int, NodeMessages] = {}
        self.timed_out = 0
        self._gone: set[int] = set()  # nodes the SuperLink reported unavailable, until taken

    def begin_round(self, server_round: int, model: ArrayRecord) -> None:
        """A new round: the deadline starts now; replies are limited relative to `model`."""
        self.round = server_round
        self.deadline = time.monotonic() + self.timeout
        self.max_reply_bytes = reply_limit(model, self.max_reply_ratio)
        self.tallies = {}
        self.node_messages = {}
        self.timed_out = 0

    def send(
        self,
        grid: Grid,
        messages: list[Message],
        label: str,
        *,
        timeout: float | None = None,
    ) -> Traffic:
        """One exchange within what is left of the round's time (or `timeout` seconds)."""
        if not messages:
            return Traffic([], 0, 0)
        start = time.monotonic()
        if timeout is None:
            timeout = self.timeout if self.deadline is None else self.deadline - start
        traffic = exchange(
            grid,
            messages,
            timeout=max(timeout, 0.0),
            max_reply_bytes=self.max_reply_bytes,
            pack=self.pack,
        )
        answered = {r.metadata.src_node_id for r in traffic.replies}
        self.note_gone(traffic.replies)
        for m in messages:
            if m.metadata.dst_node_id not in answered:
                self.timed_out += 1
                log.warning(
                    "round %d: node %d did not answer the '%s' exchange in time",
                    self.round,
                    m.metadata.dst_node_id,
                    label,
                )
        for node, size in traffic.down_by_node.items():
            self.node_messages.setdefault(node, NodeMessages()).down.append(size.content)
        for node, size in traffic.up_by_node.items():
            self.node_messages.setdefault(node, NodeMessages()).up.append(size.content)
        tally = self.tallies.setdefault(label, Tally())
        tally.bytes_up += traffic.bytes_up
        tally.bytes_down += traffic.bytes_down
        tally.seconds += time.monotonic() - start
        return traffic

    def note_gone(self, replies: Iterable[Message]) -> None:
        """Note the nodes whose replies say they went away: the SuperLink found them offline,
        or their ClientApp lost its handshake (the node restarted, keeping its id, between
        two looks of the server). Flower's own training exchange (`Strategy.start`) bypasses
        the courier: `Federation.received` notes its replies."""
        self._gone.update(r.metadata.src_node_id for r in replies if went_away(r))

    def take_gone(self) -> set[int]:
        """Nodes the SuperLink reported unavailable since the last call: they went offline,
        and one that is back (a restarted node keeps its id under SuperNode authentication)
        must be handshaked again."""
        gone, self._gone = self._gone, set()
        return gone


def went_away(reply: Message) -> bool:
    """Whether an error reply means its node left since the server last handshaked it."""
    if not reply.has_error():
        return False
    error = reply.error
    return error.code == ErrorCode.NODE_UNAVAILABLE or protocol.NO_RUN_CONFIG in error.reason


def reply_limit(model: ArrayRecord, ratio: float | None) -> int | None:
    """aggregation.max_reply_ratio x the model's bytes, plus room for metrics and framing."""
    if ratio is None:
        return None
    return int(ratio * sum(len(a.data) for a in model.values())) + REPLY_FRAMING_BYTES
