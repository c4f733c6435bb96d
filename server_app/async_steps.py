"""Asynchronous training over a Flower Grid: tasks in flight, replies taken as they come, and
one server step per call of `step`, which the round driver calls where a synchronous strategy
runs a round (so metrics, evaluation every N steps, checkpoints and progress are the driver's).

Each free slot gets a client drawn (seeded by the task's number) from those online at the
slot's virtual time and not training already; its message is the strategy's training message
with the current model, `server-round` the version it starts from plus one (the seed of the
client's randomness, as in a synchronous round). A reply's virtual finish is its start plus
its download, compute and upload on the client's profile, from the message's content bytes
and the steps it reports (content bytes: Flower's random message ids do not move the clock).
A client whose session ends before it finishes, or whose reply is an error, loses its task;
the slot frees when the task would have finished at the soonest (or at the session's end, if
later), in virtual order. `async_loop.AsyncLoop` orders what arrives.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fl_system.flower import flwr_hooks
from fl_system.heterogeneity import SystemModel
from fl_system.heterogeneity.clock import Profile, compute_seconds, transfer_seconds
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol, wire
from server_app.async_loop import AsyncLoop, Step, StepRule
from server_app.exchange import FIRST_POLL_SECONDS, poll_wait
from server_app.federated.replies import arrays_like
from server_app.federated.screening import unpack_replies
from server_app.rounds import RoundPlan, RunFailed

log = logging.getLogger(__name__)

FUTILE_TASKS = 50  # tasks per slot that may come to nothing between two steps
_DRAW = 0xA51C  # separates the draws of asynchronous slots from the rounds' sampling
_STATE = "async/"  # checkpointed: version, virtual now, tasks sent, tasks in flight
Content = Callable[[RoundPlan, int], RecordDict]  # the strategy's message for a partition


@dataclass(frozen=True)
class AsyncSettings:
    """The `async.*` group: clients at once, updates per step, the stalest update kept."""

    concurrency: int
    buffer_size: int
    max_staleness: int | None


@dataclass
class _Sent:
    partition: int
    model: ArrayRecord  # what it was sent (its reply is checked against its layout)
    down_bytes: int
    start: float


class AsyncSteps:
    """The asynchronous half of a strategy's run over one grid."""

    def __init__(
        self,
        settings: AsyncSettings,
        rule: StepRule,
        system: SystemModel,
        *,
        seed: int,
        timeout: float,
        step_cost: float = 1.0,
    ) -> None:
        self.settings = settings
        self.rule = rule
        self.system = system
        self.seed = seed
        self.timeout = timeout
        self.step_cost = step_cost
        self.loop: AsyncLoop | None = None
        self._sent: dict[int, _Sent] = {}  # task id -> what went
        self._pending: dict[str, int] = {}  # message id -> task id
        self._tasks_sent = 0  # restored by a resume: the draws go on where they were
        self._lost_offline = self._failed = 0
        self._bytes = [0, 0]  # up, down since the last step
        self._losses: dict[int, float] = {}  # task id -> its reply's training loss
        self._last_failure = ""
        self._model: tuple[int, ArrayRecord] | None = None  # the version sent, as a record
        self._restored: tuple[int, float] | None = None

    # ----- one server step -------------------------------------------------------------------
    def step(
        self,
        grid: Grid,
        nodes: Mapping[int, int],
        arrays: ArrayRecord,
        content: Content,
    ) -> tuple[ArrayRecord, dict[str, float]]:
        """Run until the next server step; its model and its metrics row."""
        loop = self._loop(arrays)
        partition_node = {p: n for n, p in nodes.items()}
        waited = time.monotonic()
        while True:
            if loop.ready_to_send():
                self._fill(grid, loop, partition_node, arrays, content)
            taken = loop.take_next()
            if taken is not None:
                waited = time.monotonic()
                task, step = taken
                if step is not None:
                    return arrays_like(arrays, step.model), self._row(step)
                if all(u.task is not task for u in loop.buffer):  # dropped, failed or lost
                    self._losses.pop(task.task_id, None)
                    self._check_progress()
                continue
            if not self._pending:
                raise RunFailed("no task is in flight and none can be sent: no client is left")
            if not self._collect(grid, loop) and time.monotonic() - waited > self.timeout:
                self._lose_all(loop)
                waited = time.monotonic()

    def _check_progress(self) -> None:
        """Many tasks in a row that came to nothing: the federation cannot make progress."""
        wasted = self._failed + self._lost_offline
        if wasted > FUTILE_TASKS * self.settings.concurrency:
            why = f"; the last failure: {self._last_failure}" if self._last_failure else ""
            raise RunFailed(
                f"{wasted} tasks since the last server step came to nothing ({self._failed} "
                f"failed, {self._lost_offline} went offline before finishing){why}"
            )

    def _loop(self, arrays: ArrayRecord) -> AsyncLoop:
        if self.loop is None:
            s = self.settings
            self.loop = AsyncLoop(
                arrays.to_numpy_ndarrays(), s.concurrency, s.buffer_size, s.max_staleness, self.rule
            )
            if self._restored is not None:
                self.loop.version, self.loop.now = self._restored
        return self.loop

    # ----- sending -----------------------------------------------------------------------------
    def _fill(
        self,
        grid: Grid,
        loop: AsyncLoop,
        partition_node: Mapping[int, int],
        arrays: ArrayRecord,
        content: Content,
    ) -> None:
        """A task into every free slot, each for a client drawn from those online and idle."""
        while loop.free_slots > 0:
            idle = sorted(set(partition_node) - loop.timeline.busy())
            start, online = self._online(idle, loop.now)
            if not online:
                return  # every client trains already, or none comes online again
            rng = np.random.default_rng(derive_seed(self.seed, self._tasks_sent, _DRAW))
            partition = int(rng.choice(online))
            node = partition_node[partition]
            model = self._record(loop, arrays)
            plan = RoundPlan(
                round=loop.version + 1,
                arrays=model,
                config=ConfigRecord({protocol.SERVER_ROUND: loop.version + 1}),
                nodes={node: partition},
            )
            message = Message(
                content=wire.pack(content(plan, partition)),
                dst_node_id=node,
                message_type=MessageType.TRAIN,
            )
            size = flwr_hooks.wire_sizes([message])[0]
            profile = self._profile(partition)
            earliest = start + transfer_seconds(
                size.content, profile.down_bytes_per_second, profile.latency
            )
            if self.system.local_steps is not None:
                earliest += compute_seconds(
                    self.system.local_steps, self.system.batch_size, profile
                )
            task = loop.send(partition, earliest, start=start)
            (message_id,) = grid.push_messages([message])
            self._pending[str(message_id)] = task.task_id
            self._sent[task.task_id] = _Sent(partition, model, size.content, start)
            self._tasks_sent += 1
            self._bytes[1] += size.whole

    def _record(self, loop: AsyncLoop, arrays: ArrayRecord) -> ArrayRecord:
        """The current model as a record with `arrays`' layer names, made once per version."""
        if self._model is None or self._model[0] != loop.version:
            self._model = (loop.version, arrays_like(arrays, loop.model))
        return self._model[1]

    def _online(self, idle: list[int], now: float) -> tuple[float, list[int]]:
        """When the next task can start and who is online then (none: nobody ever again)."""
        availability = self.system.availability
        if availability is None or not idle:
            return now, idle
        start = availability.next_online(idle, now)
        return (start, availability.online(idle, start)) if math.isfinite(start) else (now, [])

    def _profile(self, partition: int) -> Profile:
        profile = self.system.profiles[partition]
        if self.step_cost == 1.0:
            return profile
        return replace(profile, seconds_per_sample=profile.seconds_per_sample * self.step_cost)

    # ----- receiving ---------------------------------------------------------------------------
    def _collect(self, grid: Grid, loop: AsyncLoop) -> bool:
        """Pull the replies that came (waiting a little first if none has); whether any did."""
        wait = FIRST_POLL_SECONDS
        deadline = time.monotonic() + 1.0
        while True:
            started = time.monotonic()
            got = list(grid.pull_messages(list(self._pending)))
            for reply in got:
                self._received(loop, reply)
            if got or time.monotonic() >= deadline:
                return bool(got)
            time.sleep(wait)
            wait = poll_wait(wait, time.monotonic() - started)

    def _received(self, loop: AsyncLoop, reply: Message) -> None:
        task_id = self._pending.pop(reply.metadata.reply_to_message_id)
        sent = self._sent.pop(task_id)
        size = flwr_hooks.wire_sizes([reply])[0] if not reply.has_error() else None
        if size is not None:
            reply.content = wire.unpack(reply.content)
            self._bytes[0] += size.whole
        ok, failures = unpack_replies([reply], sent.model)
        task = loop.timeline.get(task_id)
        if not ok:  # comes to nothing when it would have finished at the soonest
            log.warning("task %d (partition %d): %s", task_id, sent.partition, failures[0].reason)
            self._failed += 1
            self._last_failure = f"partition {sent.partition}: {failures[0].reason}"
            loop.arrived(task_id, task.earliest, None)
            return
        (client,) = ok
        assert size is not None
        profile = self._profile(sent.partition)
        steps = float(client.metrics.get(protocol.NUM_STEPS, self.system.local_steps or 0))
        finish = (
            sent.start
            + transfer_seconds(sent.down_bytes, profile.down_bytes_per_second, profile.latency)
            + compute_seconds(steps, self.system.batch_size, profile)
            + transfer_seconds(size.content, profile.up_bytes_per_second, profile.latency)
        )
        online = self.system.availability
        end = online.session_end(sent.partition, sent.start) if online is not None else finish
        if end < finish:  # gone offline first: the server learns of it no sooner than a
            self._lost_offline += 1  # reply could have come
            loop.arrived(task_id, max(end, task.earliest), None)
            return
        loop.arrived(task_id, finish, client.arrays, float(client.num_examples))
        self._losses[task_id] = float(client.metrics.get(protocol.TRAIN_LOSS, math.nan))

    def _lose_all(self, loop: AsyncLoop) -> None:
        """round_timeout passed without a reply: every task in flight is lost."""
        log.warning(
            "no reply for %.0f s: %d tasks in flight are lost", self.timeout, len(self._pending)
        )
        for task_id in list(self._pending.values()):
            self._sent.pop(task_id, None)
            self._failed += 1
            loop.lost(task_id)
        self._pending.clear()

    # ----- the step's row and the checkpoint -------------------------------------------------
    def _row(self, step: Step) -> dict[str, float]:
        """What metrics.csv gets for a step (the driver adds the round and the evaluation)."""
        staleness = [u.staleness for u in step.updates]
        losses = [(u.weight, self._losses.pop(u.task.task_id, math.nan)) for u in step.updates]
        weight = sum(w for w, loss in losses if math.isfinite(loss))
        row: dict[str, float] = {
            "participants": len(step.updates),
            "failures": self._failed + self._lost_offline,
            "bytes_up": self._bytes[0],
            "bytes_down": self._bytes[1],
            "train_loss": (
                sum(w * loss for w, loss in losses if math.isfinite(loss)) / weight
                if weight
                else math.nan
            ),
            "virtual_clock": step.time,
            "staleness_mean": float(np.mean(staleness)),
            "staleness_max": max(staleness),
            "dropped_stale": step.dropped,
        }
        if self.system.availability is not None:
            everyone = sorted(self.system.profiles)
            row["online"] = len(self.system.availability.online(everyone, step.time))
            row["went_offline"] = self._lost_offline
        self._failed = self._lost_offline = 0
        self._last_failure = ""
        self._bytes = [0, 0]
        return row

    def state_dict(self) -> dict[str, np.ndarray]:
        """Where the run is: a resumed run goes on from this version, virtual time and draw;
        the tasks in flight are lost (their number is kept, to say so)."""
        if self.loop is None:
            return {}
        return {
            f"{_STATE}version": np.array(self.loop.version),
            f"{_STATE}now": np.array(self.loop.now),
            f"{_STATE}tasks_sent": np.array(self._tasks_sent),
            f"{_STATE}in_flight": np.array(len(self.loop.timeline)),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> int:
        """Go on from a checkpoint; returns how many tasks were in flight at the stop."""
        if f"{_STATE}version" not in state:
            return 0
        self._restored = (int(state[f"{_STATE}version"]), float(state[f"{_STATE}now"]))
        self._tasks_sent = int(state[f"{_STATE}tasks_sent"])
        return int(state[f"{_STATE}in_flight"])

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(_STATE)
