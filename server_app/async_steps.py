"""Asynchronous training over a Flower Grid: tasks in flight, replies taken as they come, and
one server step per call of `step`, which the round driver calls where a synchronous strategy
runs a round (so metrics, evaluation every N steps, checkpoints and progress are the driver's).

Each free slot gets a client drawn (seeded by the draw's number) from those online and not
training already (and active: stragglers.*); its message is the strategy's training message
with the current model (under compression.down, the broadcasts its client misses),
`server-round` the version it starts from plus one (the seed of the client's randomness, as in
a synchronous round). When a task starts and finishes is its clock's (`async_clocks`: in
simulation from the client's profile, the message's content bytes and the steps it reports,
so a run is the same on any machine; on real nodes when its reply reaches the server). A task
whose client goes offline first, or whose reply is an error, comes to nothing and frees its
slot in turn; a node found gone is forgotten. `async_loop.AsyncLoop` orders what arrives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fl_system.flower import flwr_hooks
from fl_system.learning.compression import Compression
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol, wire
from server_app.async_clocks import Times
from server_app.async_in_flight import Broadcasts, InFlight, Sent
from server_app.async_loop import AsyncLoop, Step, StepRule, Update
from server_app.async_state import PREFIX, AsyncState, decode, encode
from server_app.async_tally import StepTally
from server_app.federated.replies import arrays_like
from server_app.rounds import RoundPlan, RunFailed
from server_app.stragglers import Stragglers

log = logging.getLogger(__name__)

_DRAW = 0xA51C  # separates the draws of asynchronous slots from the rounds' sampling
Content = Callable[[RoundPlan, int], RecordDict]  # the strategy's message for a partition
Refresh = Callable[[Iterable[int]], Mapping[int, int]]  # nodes gone -> node -> partition now


@dataclass(frozen=True)
class AsyncSettings:
    """The `async.*` group: clients at once, updates per step, the stalest update kept."""

    concurrency: int
    buffer_size: int
    max_staleness: int | None


@dataclass(frozen=True)
class _Outbox:
    """Where a step's messages go and what they are made of."""

    grid: Grid
    partition_node: dict[int, int]  # updated when a node leaves or joins
    arrays: ArrayRecord  # the layer names
    content: Content


class AsyncSteps:
    """The asynchronous half of a strategy's run over one grid."""

    def __init__(
        self,
        settings: AsyncSettings,
        rule: StepRule,
        times: Times,
        *,
        seed: int,
        timeout: float,
        compression: Compression | None = None,
        stragglers: Stragglers | None = None,
        broadcasts: Broadcasts | None = None,
    ) -> None:
        self.settings = settings
        self.rule = rule
        self.times = times
        self.stragglers = stragglers  # stragglers.*: each draw's budget of local steps
        self.broadcasts = broadcasts  # compression.down
        self._broadcast: dict[str, int] = {}  # the last step's broadcast, for its row
        self._names = ArrayRecord()  # the model's layer names, for a step's broadcast
        self.seed = seed
        self.flight = InFlight(times, timeout, compression, broadcasts)
        self.loop: AsyncLoop | None = None
        self._tasks_sent = 0  # restored by a resume: the draws go on where they were
        self.tally = StepTally()  # since the last step
        self._model: tuple[int, ArrayRecord] | None = None  # the version sent, as a record
        self._restored: AsyncState | None = None
        self._resend: list[int] = []  # restored tasks to send again

    # ----- one server step -------------------------------------------------------------------
    def step(
        self,
        grid: Grid,
        refresh: Refresh,
        arrays: ArrayRecord,
        content: Content,
    ) -> tuple[ArrayRecord, dict[str, float]]:
        """Run until the next server step; its model and its metrics row. `refresh` names the
        nodes now connected (and forgets those found gone): at the start, and when a task's
        node is found gone, so that its slot goes to a node that is there."""
        loop = self._loop(arrays)
        self._names = arrays
        out = _Outbox(grid, {p: n for n, p in refresh(()).items()}, arrays, content)
        if self._resend:
            self._send_again(loop, out)
        waited = time.monotonic()
        while True:
            if loop.ready_to_send():
                self._fill(loop, out)
            taken = loop.take_next()
            if taken is not None:
                waited = time.monotonic()
                task, step = taken
                self.tally.taken(task.task_id)
                if step is not None:
                    return arrays_like(arrays, step.model), self._row(step)
                if all(u.task is not task for u in loop.buffer):  # dropped, failed or lost
                    self.tally.check_progress(self.settings.concurrency)
                continue
            if not self.flight.pending:
                raise RunFailed("no task is in flight and none can be sent: no client is left")
            got = self.flight.collect(grid, loop, self.tally)
            if not got and time.monotonic() - waited > self.flight.timeout:
                self.flight.lose_all(loop, self.tally)
                waited = time.monotonic()
            if gone := self.flight.take_gone():
                out.partition_node.clear()
                out.partition_node.update({p: n for n, p in refresh(gone).items()})

    def _loop(self, arrays: ArrayRecord) -> AsyncLoop:
        if self.loop is None:
            s = self.settings
            self.loop = AsyncLoop(
                arrays.to_numpy_ndarrays(),
                s.concurrency,
                s.buffer_size,
                s.max_staleness,
                self._stepped,
            )
            if (saved := self._restored) is not None:
                tasks, starts = (saved.tasks, saved.starts) if self.times.resends else ([], {})
                self.loop.restore(saved.version, saved.now, tasks, saved.sent, starts)
                self._tasks_sent = saved.sent
                self._resend = [t.task_id for t in tasks]
                if self.broadcasts is not None:  # the tasks in flight at the stop may or may
                    self.broadcasts.forget_clients()  # not have moved their clients' models
        return self.loop

    def _stepped(self, current: list[np.ndarray], updates: Sequence[Update]) -> list[np.ndarray]:
        """The algorithm's step; under compression.down, the model clients will hold (its
        broadcast made)."""
        new = self.rule(current, updates)
        if self.broadcasts is None:
            return new
        assert self.loop is not None
        held, self._broadcast = self.broadcasts.commit(
            arrays_like(self._names, new), self.loop.version + 1, keep_pending=True
        )
        return held.to_numpy_ndarrays()

    # ----- sending -----------------------------------------------------------------------------
    def _fill(self, loop: AsyncLoop, out: _Outbox) -> None:
        """A task into every free slot, each for a client drawn from those online and idle."""
        while loop.free_slots > 0:
            idle = sorted(set(out.partition_node) - loop.timeline.busy())
            start, online = self.times.start(idle, loop.now)
            if not online:
                return  # every client trains already, or none comes online again
            rng = np.random.default_rng(derive_seed(self.seed, self._tasks_sent, _DRAW))
            partition = int(rng.choice(online))
            steps = self._budget(partition)
            if steps == 0:  # inactive this time: nothing is sent, the next draw takes the slot
                self._tasks_sent += 1
                self.tally.check_progress(self.settings.concurrency)
                continue
            message, model = self._message(loop, out, partition, steps=steps)
            size = flwr_hooks.wire_sizes([message])[0]
            earliest = self.times.earliest(partition, start, size.content, steps)
            task = loop.send(partition, earliest, start=start, steps=steps)
            sent = Sent(partition, message.metadata.dst_node_id, model, size.content, start)
            self.flight.push(out.grid, message, task.task_id, sent)
            self._tasks_sent += 1
            self.tally.bytes_down += size.whole

    def _budget(self, partition: int) -> int | None:
        """stragglers.*: this draw's local steps for `partition` (0: inactive; None: all E),
        drawn from (seed, draw number, partition) as a round's are from its round."""
        if self.stragglers is None:
            return None
        steps = self.stragglers.budget(self._tasks_sent + 1, partition)
        self.tally.inactive += steps == 0
        self.tally.incomplete += 0 < steps < self.stragglers.steps
        return steps if steps < self.stragglers.steps else None

    def _send_again(self, loop: AsyncLoop, out: _Outbox) -> None:
        """The tasks a resumed run's checkpoint had in flight, sent as they were first sent
        (same model, same seed); one whose client is gone is lost."""
        for task_id in self._resend:
            task = loop.timeline.get(task_id)
            if task.partition not in out.partition_node:
                log.warning("task %d: partition %d has no node now", task_id, task.partition)
                loop.lost(task_id)
                continue
            message, model = self._message(loop, out, task.partition, task.version, task.steps)
            size = flwr_hooks.wire_sizes([message])[0].content
            node = message.metadata.dst_node_id
            self.flight.push(
                out.grid, message, task_id, Sent(task.partition, node, model, size, task.start)
            )
        self._resend = []

    def _message(
        self,
        loop: AsyncLoop,
        out: _Outbox,
        partition: int,
        version: int | None = None,
        steps: int | None = None,
    ) -> tuple[Message, ArrayRecord]:
        """The training message for `partition` from model `version` (the current one), for
        `steps` local steps (None: train.local_steps)."""
        version = loop.version if version is None else version
        model = self._record(loop, out.arrays, version)
        node = out.partition_node[partition]
        plan = RoundPlan(
            round=version + 1,
            arrays=model,
            config=ConfigRecord({protocol.SERVER_ROUND: version + 1}),
            nodes={node: partition},
            node_config={} if steps is None else {partition: {protocol.LOCAL_STEPS: steps}},
        )
        message = Message(out.content(plan, partition), node, MessageType.TRAIN)
        if self.broadcasts is not None:
            (message,) = self.broadcasts.outgoing([message], {node: partition}, model, version)
        message.content = wire.pack(message.content)
        return message, model

    def _record(self, loop: AsyncLoop, arrays: ArrayRecord, version: int) -> ArrayRecord:
        """A model as a record with `arrays`' layer names; the current one made once."""
        if version != loop.version:
            return arrays_like(arrays, loop.start_model(version))
        if self._model is None or self._model[0] != loop.version:
            self._model = (loop.version, arrays_like(arrays, loop.model))
        return self._model[1]

    # ----- the step's row and the checkpoint -------------------------------------------------
    def _row(self, step: Step) -> dict[str, float]:
        """What metrics.csv gets for a step (the driver adds the round and the evaluation)."""
        tally, self.tally = self.tally, self.tally.next()
        row = tally.row(step, self.times.column)
        if online := self.times.online(step.time):
            row.update(online, went_offline=tally.offline)
        if self.stragglers is not None:
            row.update(inactive=tally.inactive, incomplete=tally.incomplete)
        row.update(self._broadcast)
        return row

    def state_dict(self) -> dict[str, np.ndarray]:
        """Where the run is: the version, virtual time and draws, and the tasks in flight with
        the models they started from (a resumed run sends them again)."""
        loop = self.loop
        if loop is None:
            return {}
        tasks = loop.timeline.in_flight
        return encode(AsyncState(loop.version, loop.now, self._tasks_sent, tasks, loop.starts()))

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> str | None:
        """Go on from a checkpoint; returns what becomes of the tasks in flight at the stop."""
        saved = self._restored = decode(state)
        if saved is None:
            return None
        self.times.resume_at(saved.now)
        if not saved.tasks:
            return None
        if not self.times.resends:
            return f"{len(saved.tasks)} tasks in flight at the stop are lost; new ones take over"
        return f"{len(saved.tasks)} tasks in flight at the stop are sent again, as they were sent"

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(PREFIX)
