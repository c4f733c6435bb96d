"""Send messages and collect replies: packed for the wire, counted, and polled quickly.

Models cross the wire packed (`fl_system.wire`): messages are packed just before the push
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

import time
from collections.abc import Iterable
from dataclasses import dataclass

from flwr.app import Error, Message, Metadata
from flwr.serverapp import Grid

from fl_system import flwr_hooks, wire

FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.2  # the slowest polling interval
PULL_COST_FACTOR = 50  # wait at most this many pulls' time: polling costs <= ~2% of a core


@dataclass(frozen=True)
class Traffic:
    """The replies of one exchange and the bytes it moved each way."""

    replies: list[Message]
    bytes_down: int
    bytes_up: int


REPLY_TOO_LARGE = 413  # Error.code of a reply refused for its size


def exchange(
    grid: Grid,
    messages: Iterable[Message],
    *,
    timeout: float,
    max_reply_bytes: int | None = None,
) -> Traffic:
    """Push `messages`; return the replies that arrived within `timeout` seconds."""
    messages = list(messages)
    originals = [m.content for m in messages]
    for message, packed in zip(messages, wire.pack_each(originals), strict=True):
        message.content = packed
    bytes_down = flwr_hooks.wire_bytes(messages)
    try:
        replies, bytes_up = _push_and_pull(grid, messages, timeout, max_reply_bytes)
    finally:
        for message, content in zip(messages, originals, strict=True):
            message.content = content  # the caller keeps seeing what it built
    return Traffic(replies, bytes_down, bytes_up)


def _push_and_pull(
    grid: Grid, messages: list[Message], timeout: float, max_reply_bytes: int | None
) -> tuple[list[Message], int]:
    """The replies and their bytes; each is counted and unpacked as it arrives, not at the end."""
    flwr_hooks.abandon_replies_of_dead_senders(lambda node: node in set(grid.get_node_ids()))
    ids = list(grid.push_messages(messages))
    sent_to = {mid: m.metadata.dst_node_id for mid, m in zip(ids, messages, strict=True)}
    pending = set(ids)
    deadline = time.monotonic() + timeout
    replies: list[Message] = []
    bytes_up = 0
    wait, pulls, pulling = FIRST_POLL_SECONDS, 0, 0.0
    while pending:
        start = time.monotonic()
        got = [_attributed(r, sent_to) for r in grid.pull_messages(pending)]
        pulls, pulling = pulls + 1, pulling + time.monotonic() - start
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        for reply in got:
            if not reply.has_error():
                size = flwr_hooks.wire_bytes([reply])
                bytes_up += size
                if max_reply_bytes is not None and size > max_reply_bytes:
                    reply = _refused(reply, size, max_reply_bytes)
                else:
                    reply.content = wire.unpack(reply.content)
            replies.append(reply)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(wait)
        wait = poll_wait(wait, pulling / pulls)
    return replies, bytes_up


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
    return Message(metadata=_copy(reply.metadata, src_node_id=node), error=reply.error)


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
