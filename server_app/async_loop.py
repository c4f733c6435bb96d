"""The asynchronous server's bookkeeping: `concurrency` clients training at once, their updates
taken in the order they finish, a server step every `buffer_size` of them.

No barrier: when a task is taken its slot frees at its finish time and the caller sends a new
task there, from the model as it is then. Every task that ends at one instant is taken first
(`ready_to_send` says when), so a step that instant completes is made before the freed slots
are filled: with `buffer_size = concurrency` = every client and equal times, each step is a
synchronous round. A task
that started from version tau and is taken at version t has staleness t - tau; beyond
`max_staleness` it is dropped (counted, not buffered). What a step does with its buffer is the
algorithm's (`StepRule`: FedBuff's buffered average, FedAsync's mixing); the model each task
started from is kept while it is in flight, for the rules that need it. Plain arrays and
virtual times only: the driver sends and receives the messages, and a test drives it by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fl_system.heterogeneity.timeline import Task, Timeline


@dataclass(frozen=True)
class Update:
    """A taken task's reply: the client's model, where it started, how stale it is."""

    task: Task
    staleness: int
    model: list[np.ndarray]
    start: list[np.ndarray] | None  # the model it trained from; None: the current one
    weight: float  # its weight in a buffer (its examples)
    reply: Any = None  # what the caller passed with it (the reply: for Disco's weights)


@dataclass(frozen=True)
class Step:
    """One server step: the version it made, when, from which updates, and the model."""

    version: int
    time: float
    updates: tuple[Update, ...]
    dropped: int  # too stale, since the previous step
    model: list[np.ndarray]


StepRule = Callable[[list[np.ndarray], Sequence[Update]], list[np.ndarray]]


@dataclass
class AsyncLoop:
    """The model, its version, the tasks in flight and the buffer, in virtual time."""

    model: list[np.ndarray]
    concurrency: int
    buffer_size: int
    max_staleness: int | None
    rule: StepRule
    version: int = 0
    now: float = 0.0
    timeline: Timeline = field(default_factory=Timeline)
    buffer: list[Update] = field(default_factory=list)
    dropped: int = 0
    _starts: dict[int, list[np.ndarray]] = field(default_factory=dict)  # version -> model
    _replies: dict[int, tuple[list[np.ndarray] | None, float, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.buffer_size < 1:
            raise ValueError(
                f"concurrency and buffer_size must be >= 1, got {self.concurrency} and "
                f"{self.buffer_size}"
            )

    @property
    def free_slots(self) -> int:
        return self.concurrency - len(self.timeline)

    def ready_to_send(self) -> bool:
        """Whether every task ending now was taken: none in flight can still end by now."""
        return all(
            (t.finish if t.finish is not None else t.earliest) > self.now
            for t in self.timeline.in_flight
        )

    def send(
        self, partition: int, earliest: float, start: float | None = None, steps: int | None = None
    ) -> Task:
        """A task for `partition` from the current model, starting now (or at `start`, later:
        when its client comes online), finishing no sooner than `earliest` (its download and
        compute); `steps`: the local steps it was given, if not train.local_steps."""
        if self.free_slots <= 0:
            raise ValueError(f"all {self.concurrency} slots are busy")
        begin = self.now if start is None else start
        if begin < self.now:
            raise ValueError(f"a task cannot start ({begin}) before now ({self.now})")
        self._starts[self.version] = self.model
        return self.timeline.send(partition, self.version, begin, earliest, steps)

    def arrived(
        self,
        task_id: int,
        finish: float,
        model: list[np.ndarray] | None,
        weight: float = 0.0,
        reply: Any = None,
    ) -> None:
        """A task's reply: its model and weight, and when it finished (its upload counted);
        `model` None: the task came to nothing at `finish` (its client went offline, or
        failed), and its slot frees then, in turn. `reply` travels with its update."""
        self.timeline.finished(task_id, finish)
        self._replies[task_id] = (model, weight, reply)

    def lost(self, task_id: int) -> Task:
        """A task that will never reply (its node left): its slot frees now."""
        self._replies.pop(task_id, None)
        return self._release(self.timeline.take(task_id))

    def take_next(self) -> tuple[Task, Step | None] | None:
        """Take the task due next, if it is certain which: buffer (or drop) its update and
        step when the buffer is full. None: wait for more replies."""
        task = self.timeline.next_due()
        if task is None:
            return None
        assert task.finish is not None
        self.timeline.take(task.task_id)
        self.now = max(self.now, task.finish)
        model, weight, reply = self._replies.pop(task.task_id)
        if model is None:
            self._release(task)
            return task, None
        staleness = self.version - task.version
        if self.max_staleness is not None and staleness > self.max_staleness:
            self.dropped += 1
            self._release(task)
            return task, None
        start = None if staleness == 0 else self._starts[task.version]
        self.buffer.append(Update(task, staleness, model, start, weight, reply))
        self._release(task)
        if len(self.buffer) < self.buffer_size:
            return task, None
        self.model = self.rule(self.model, self.buffer)
        self.version += 1
        step = Step(self.version, self.now, tuple(self.buffer), self.dropped, self.model)
        self.buffer, self.dropped = [], 0
        return task, step

    def start_model(self, version: int) -> list[np.ndarray]:
        """The model of `version`, which a task in flight started from (or the current one)."""
        return self.model if version == self.version else self._starts[version]

    def starts(self) -> dict[int, list[np.ndarray]]:
        """The older models tasks in flight started from, by version (for a checkpoint)."""
        return {v: m for v, m in self._starts.items() if v != self.version}

    def restore(
        self,
        version: int,
        now: float,
        tasks: list[Task],
        sent: int,
        starts: Mapping[int, list[np.ndarray]],
    ) -> None:
        """Go on from a checkpoint taken after a step: the model is this loop's, `tasks` were
        in flight (to be sent again, their replies unknown) from the models in `starts`."""
        if self.buffer or len(self.timeline):
            raise ValueError("only a loop that has not started can be restored")
        missing = {t.version for t in tasks} - set(starts) - {version}
        if missing:
            raise ValueError(f"the models of versions {sorted(missing)} are not in the checkpoint")
        self.version, self.now = version, now
        self.timeline.restore(tasks, sent)
        self._starts = {**starts, version: self.model}

    def _release(self, task: Task) -> Task:
        """Forget start models no task in flight needs any more (a buffered update holds
        its own)."""
        needed = {t.version for t in self.timeline.in_flight} | {self.version}
        for version in [v for v in self._starts if v not in needed]:
            del self._starts[version]
        return task
