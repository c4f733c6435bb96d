"""The tasks an asynchronous run has in flight over a Flower Grid: each message pushed, its
reply pulled as it comes and read back (unpacked; under compression.up decoded against the
model its client was sent; checked against that model's layout), and handed to the loop at
the time its clock gives it (`async_clocks`), or as nothing when it failed, its client went
offline first, or round_timeout passed without any reply."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from flwr.app import ArrayRecord, Message
from flwr.serverapp import Grid

from fl_system.flower import flwr_hooks
from fl_system.learning.compression import Compression
from fl_system.messages import protocol, wire
from server_app.async_clocks import Times
from server_app.async_loop import AsyncLoop
from server_app.async_tally import Outcome, StepTally
from server_app.compression import expand_reply
from server_app.exchange import FIRST_POLL_SECONDS, poll_wait
from server_app.federated.screening import unpack_replies
from server_app.nodes import LOST

log = logging.getLogger(__name__)


class Broadcasts(Protocol):
    """compression.down's side of the federation (`Federation`): the global model sent as
    the broadcasts each client misses, confirmed by replies, moved on by each step."""

    def outgoing(
        self,
        messages: Sequence[Message],
        nodes: Mapping[int, int],
        model: ArrayRecord,
        version: int,
    ) -> list[Message]: ...

    def confirm(self, replies: Sequence[Message]) -> None: ...

    def forget_clients(self) -> None: ...

    def commit(
        self, arrays: ArrayRecord, server_round: int, *, keep_pending: bool
    ) -> tuple[ArrayRecord, dict[str, int]]: ...


@dataclass
class Sent:
    """What went with a task."""

    partition: int
    node: int
    model: ArrayRecord  # what it was sent (its reply is checked against its layout)
    down_bytes: int
    start: float


class InFlight:
    """The messages of the tasks in flight, and their replies as they come.

    Parameters
    ----------
    times : Times
        When a task finishes or fails (the virtual clock's, or the wall's on real nodes).
    timeout : float
        round_timeout: seconds without any reply after which every task in flight is lost.
    compression : Compression | None
        compression.up: replies decoded against the model their client was sent.
    broadcasts : Broadcasts | None
        compression.down: the broadcasts a reply confirms its client holds.
    """

    def __init__(
        self,
        times: Times,
        timeout: float,
        compression: Compression | None = None,
        broadcasts: Broadcasts | None = None,
    ) -> None:
        self.times = times
        self.timeout = timeout
        self.compression = compression
        self.broadcasts = broadcasts
        self.pending: dict[str, int] = {}  # message id -> task id
        self.sent: dict[int, Sent] = {}  # task id -> what went
        self._gone: set[int] = set()  # nodes a task found gone since the last look

    def push(self, grid: Grid, message: Message, task_id: int, sent: Sent) -> None:
        (message_id,) = grid.push_messages([message])
        self.pending[str(message_id)] = task_id
        self.sent[task_id] = sent

    def take_gone(self) -> set[int]:
        """The nodes replies found gone since the last call (their slots go to others)."""
        gone, self._gone = self._gone, set()
        return gone

    def collect(self, grid: Grid, loop: AsyncLoop, tally: StepTally) -> bool:
        """Pull the replies that came (waiting a little first if none has); whether any did."""
        wait = FIRST_POLL_SECONDS
        deadline = time.monotonic() + 1.0
        while True:
            started = time.monotonic()
            got = list(grid.pull_messages(list(self.pending)))
            for reply in got:
                self._received(loop, reply, tally)
            self.times.looked(loop.timeline)
            if got or time.monotonic() >= deadline:
                return bool(got)
            time.sleep(wait)
            wait = poll_wait(wait, time.monotonic() - started)

    def _received(self, loop: AsyncLoop, reply: Message, tally: StepTally) -> None:
        task_id = self.pending.pop(reply.metadata.reply_to_message_id)
        sent = self.sent.pop(task_id)
        if self.broadcasts is not None:
            self.broadcasts.confirm([reply])
        size = flwr_hooks.wire_sizes([reply])[0] if not reply.has_error() else None
        if size is not None:
            reply.content = wire.unpack(reply.content)
            if self.compression is not None:
                expand_reply(self.compression, sent.model, reply)
        up = size.whole if size is not None else 0
        ok, failures = unpack_replies([reply], sent.model)
        task = loop.timeline.get(task_id)
        if not ok:  # comes to nothing when it would have finished at the soonest
            if reply.has_error() and reply.error.code in LOST:
                self._gone.add(sent.node)
            log.warning("task %d (partition %d): %s", task_id, sent.partition, failures[0].reason)
            why = f"partition {sent.partition}: {failures[0].reason}"
            tally.outcomes[task_id] = Outcome(up, failure=why)
            loop.arrived(task_id, self.times.failed(task.earliest), None)
            return
        (client,) = ok
        assert size is not None
        steps = client.metrics.get(protocol.NUM_STEPS)
        finish, offline = self.times.finish(
            task, sent.down_bytes, size.content, None if steps is None else float(steps)
        )
        if offline:  # gone first: the server learns of it no sooner than a reply could come
            tally.outcomes[task_id] = Outcome(offline=True)
            loop.arrived(task_id, finish, None)
            return
        loss = float(client.metrics.get(protocol.TRAIN_LOSS, math.nan))
        tally.outcomes[task_id] = Outcome(up, loss=loss)
        loop.arrived(task_id, finish, client.arrays, float(client.num_examples), client)

    def lose_all(self, loop: AsyncLoop, tally: StepTally) -> None:
        """round_timeout passed without a reply: every task in flight is lost."""
        log.warning(
            "no reply for %.0f s: %d tasks in flight are lost", self.timeout, len(self.pending)
        )
        for task_id in list(self.pending.values()):
            self.sent.pop(task_id, None)
            tally.failed += 1
            loop.lost(task_id)
        self.pending.clear()
