"""The two clocks an asynchronous run orders its updates by.

`VirtualTimes` (simulation): a task's times come from its client's profile: it starts when a
slot frees and its client is online, its download and compute give its earliest finish, its
reply's upload its finish; a client whose session ends first loses the task. The same run for
the same seed, however fast this machine is.

`WallTimes` (runtime=local|remote): a task finishes when its reply reaches the server; a task
still out can finish no sooner than the last look found it missing, so replies are taken in the
order they came.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from fl_system.heterogeneity import SystemModel
from fl_system.heterogeneity.clock import Profile, compute_seconds, transfer_seconds
from fl_system.heterogeneity.timeline import Task, Timeline


class VirtualTimes:
    """Times from the clients' profiles and sessions (`system=...`)."""

    column = "virtual_clock"
    resends = True  # a resumed run's tasks in flight, sent again, reply as they would have

    def __init__(self, system: SystemModel, step_cost: float = 1.0) -> None:
        self.system = system
        self.step_cost = step_cost

    def resume_at(self, seconds: float) -> None:
        """A resumed run's virtual time is its loop's, restored from the checkpoint."""

    def start(self, idle: list[int], now: float) -> tuple[float, list[int]]:
        """When the next task can start and who is online then (none: nobody ever again)."""
        availability = self.system.availability
        if availability is None or not idle:
            return now, idle
        start = availability.next_online(idle, now)
        return (start, availability.online(idle, start)) if math.isfinite(start) else (now, [])

    def earliest(self, partition: int, start: float, down_bytes: int, steps: int | None) -> float:
        """The soonest a task sent at `start` can finish: its download and local steps
        (`steps`, or train.local_steps)."""
        profile = self._profile(partition)
        soonest = start + transfer_seconds(
            down_bytes, profile.down_bytes_per_second, profile.latency
        )
        if (work := steps if steps is not None else self.system.local_steps) is not None:
            soonest += compute_seconds(work, self.system.batch_size, profile)
        return soonest

    def finish(
        self, task: Task, down_bytes: int, up_bytes: int, steps: float | None
    ) -> tuple[float, bool]:
        """When the task's upload ends, and whether its client went offline first (then the
        time is its session's end, or its earliest finish if later)."""
        profile = self._profile(task.partition)
        done = (self.system.local_steps or 0) if steps is None else steps
        finish = (
            task.start
            + transfer_seconds(down_bytes, profile.down_bytes_per_second, profile.latency)
            + compute_seconds(done, self.system.batch_size, profile)
            + transfer_seconds(up_bytes, profile.up_bytes_per_second, profile.latency)
        )
        online = self.system.availability
        end = online.session_end(task.partition, task.start) if online is not None else finish
        return (max(end, task.earliest), True) if end < finish else (finish, False)

    def failed(self, earliest: float) -> float:
        """When a failed task comes to nothing: when it would have finished at the soonest."""
        return earliest

    def looked(self, timeline: Timeline) -> None:
        """Replies were pulled: virtual times do not move with them."""

    def online(self, at: float) -> dict[str, float]:
        """The row's availability columns at virtual time `at` (none without sessions)."""
        availability = self.system.availability
        if availability is None:
            return {}
        return {"online": len(availability.online(sorted(self.system.profiles), at))}

    def _profile(self, partition: int) -> Profile:
        profile = self.system.profiles[partition]
        if self.step_cost == 1.0:
            return profile
        return replace(profile, seconds_per_sample=profile.seconds_per_sample * self.step_cost)


class WallTimes:
    """Seconds since the run started on this server (a resumed run goes on from its count)."""

    column = "wall_clock"
    resends = False  # real nodes: a resumed run's tasks in flight are lost, and said so

    def __init__(self) -> None:
        self._origin: float | None = None  # set when the first task goes out
        self._counted = 0.0  # the stopped run's seconds, when resumed

    def resume_at(self, seconds: float) -> None:
        """Go on counting from where the stopped run's clock was."""
        self._counted = seconds

    def now(self) -> float:
        if self._origin is None:
            self._origin = time.monotonic() - self._counted
        return time.monotonic() - self._origin

    def start(self, idle: list[int], now: float) -> tuple[float, list[int]]:
        return max(now, self.now()), idle

    def earliest(self, partition: int, start: float, down_bytes: int, steps: int | None) -> float:
        return start

    def finish(
        self, task: Task, down_bytes: int, up_bytes: int, steps: float | None
    ) -> tuple[float, bool]:
        return max(self.now(), task.earliest), False

    def failed(self, earliest: float) -> float:
        return max(self.now(), earliest)

    def looked(self, timeline: Timeline) -> None:
        """A task whose reply is still out finishes after this look."""
        timeline.not_before(math.nextafter(self.now(), math.inf))

    def online(self, at: float) -> dict[str, float]:
        return {}


Times = VirtualTimes | WallTimes
