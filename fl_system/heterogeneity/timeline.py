"""The virtual clock's timeline for asynchronous training: tasks in flight, taken in the order
they finish on the clients' devices, whatever order their replies reach this machine in.

A task is one client training from one model version. It starts at a virtual time (when a
slot freed) and finishes after its download, compute and upload on the client's profile.
The first two are known when it is sent (the message's bytes, the local steps): `earliest`.
The upload is known once its reply arrives (the reply's bytes): then `finish`. `next_due`
names the next task to take only when that is certain: its finish is known and no task whose
finish is still unknown could end before it. Ties go to the task sent first, so a run is the
same for the same seed however fast this machine runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Task:
    """One client's training in flight: from model `version`, sent at virtual time `start`."""

    task_id: int  # the order tasks were sent in, which breaks ties
    partition: int
    version: int
    start: float
    earliest: float  # the soonest it can finish: start, download and compute
    finish: float | None = None  # known once its reply arrived (the upload added)
    steps: int | None = None  # the local steps it was given (None: train.local_steps)

    def before(self, other: Task) -> bool:
        """Whether this task (finish known) ends before `other` could."""
        assert self.finish is not None
        bound = other.finish if other.finish is not None else other.earliest
        return (self.finish, self.task_id) < (bound, other.task_id)


class Timeline:
    """The tasks in flight, in virtual time."""

    def __init__(self) -> None:
        self._tasks: dict[int, Task] = {}
        self._sent = 0

    @property
    def in_flight(self) -> list[Task]:
        return sorted(self._tasks.values(), key=lambda t: t.task_id)

    def __len__(self) -> int:
        return len(self._tasks)

    def get(self, task_id: int) -> Task:
        return self._tasks[task_id]

    def busy(self) -> set[int]:
        """The partitions training now (a client runs one task at a time)."""
        return {t.partition for t in self._tasks.values()}

    def send(
        self, partition: int, version: int, start: float, earliest: float, steps: int | None = None
    ) -> Task:
        """A new task, numbered in sending order."""
        if earliest < start:
            raise ValueError(f"a task cannot finish ({earliest}) before it starts ({start})")
        if partition in self.busy():
            raise ValueError(f"partition {partition} is training already")
        task = Task(self._sent, partition, version, start, earliest, steps=steps)
        self._tasks[task.task_id] = task
        self._sent += 1
        return task

    def finished(self, task_id: int, finish: float) -> Task:
        """Its reply arrived: it finishes at `finish` (its upload counted)."""
        task = self._tasks[task_id]
        if finish < task.earliest:
            raise ValueError(
                f"task {task_id} finishes at {finish}, before its earliest {task.earliest}"
            )
        self._tasks[task_id] = task = replace(task, finish=finish)
        return task

    def not_before(self, time: float) -> None:
        """Tasks whose replies are still out finish no sooner than `time` (a wall clock's
        look found them missing)."""
        for task_id, task in self._tasks.items():
            if task.finish is None and task.earliest < time:
                self._tasks[task_id] = replace(task, earliest=time)

    def next_due(self) -> Task | None:
        """The task that finishes first among those in flight, once certain (None: wait for
        more replies, or nothing is in flight)."""
        known = [t for t in self._tasks.values() if t.finish is not None]
        if not known:
            return None
        first = min(known, key=lambda t: (t.finish, t.task_id))
        others = (t for t in self._tasks.values() if t is not first)
        return first if all(first.before(t) for t in others) else None

    def take(self, task_id: int) -> Task:
        """Remove a task from flight (applied, dropped or lost) and return it."""
        return self._tasks.pop(task_id)

    @property
    def sent(self) -> int:
        """How many tasks were ever sent (the next task's id)."""
        return self._sent

    def restore(self, tasks: list[Task], sent: int) -> None:
        """Put back the tasks a checkpoint had in flight (their replies not yet known) and
        the count of tasks sent, so new ones are numbered where the stopped run's were."""
        if self._tasks or self._sent:
            raise ValueError("only an empty timeline can be restored")
        if any(t.task_id >= sent for t in tasks):
            raise ValueError(f"a restored task's id is not below the {sent} tasks sent")
        self._tasks = {t.task_id: replace(t, finish=None) for t in tasks}
        self._sent = sent
