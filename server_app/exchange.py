"""Send messages and collect replies, polling faster than Flower's `send_and_receive`.

Flower's Grid sleeps 3 s between pulls; on small models that idles the server for most of a
deployment round. Pulling is a cheap local call to the SuperLink, so poll quickly at first
(replies from simulated clients come back within milliseconds) and back off to 0.2 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message
from flwr.serverapp import Grid

FIRST_POLL_SECONDS = 0.005
POLL_SECONDS = 0.2  # the slowest polling interval


def exchange(grid: Grid, messages: Iterable[Message], *, timeout: float) -> list[Message]:
    """Push `messages`; return the replies that arrived within `timeout` seconds."""
    pending = set(grid.push_messages(messages))
    deadline = time.monotonic() + timeout
    replies: list[Message] = []
    wait = FIRST_POLL_SECONDS
    while pending:
        got = list(grid.pull_messages(pending))
        replies.extend(got)
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(wait)
        wait = min(wait * 2, POLL_SECONDS)
    return replies
