"""What happened between two asynchronous server steps, for the step's row of metrics.csv:
tasks that failed, went offline or drew an inactive client, bytes, the updates' losses.

A reply's outcome is recorded as it reaches the server and counted when its task is taken,
in the clock's order, so a simulated run's rows do not depend on the order replies reach this
machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from server_app.async_loop import Step
from server_app.federated.replies import weighted_mean
from server_app.rounds import RunFailed

FUTILE_TASKS = 50  # tasks per slot that may come to nothing between two steps


@dataclass(frozen=True)
class Outcome:
    """What a reply brought."""

    up_bytes: int = 0
    failure: str = ""  # why it failed
    offline: bool = False  # its client went offline before it finished
    loss: float = math.nan  # its training loss


@dataclass
class StepTally:
    """The counts since the last server step."""

    failed: int = 0
    offline: int = 0
    inactive: int = 0  # draws of an inactive client (stragglers.inactive): nothing sent
    incomplete: int = 0  # tasks sent fewer steps than train.local_steps
    bytes_up: int = 0
    bytes_down: int = 0
    last_failure: str = ""
    outcomes: dict[int, Outcome] = field(default_factory=dict)  # task id -> its reply's
    losses: dict[int, float] = field(default_factory=dict)  # task id (taken) -> its loss

    def taken(self, task_id: int) -> None:
        """A task was taken (applied, buffered, dropped or come to nothing): count it."""
        outcome = self.outcomes.pop(task_id, Outcome())
        self.bytes_up += outcome.up_bytes
        self.offline += outcome.offline
        self.losses[task_id] = outcome.loss
        if outcome.failure:
            self.failed += 1
            self.last_failure = outcome.failure

    def check_progress(self, concurrency: int) -> None:
        """Many tasks in a row that came to nothing: the federation cannot make progress."""
        wasted = self.failed + self.offline + self.inactive
        if wasted > FUTILE_TASKS * concurrency:
            why = f"; the last failure: {self.last_failure}" if self.last_failure else ""
            raise RunFailed(
                f"{wasted} tasks since the last server step came to nothing ({self.failed} "
                f"failed, {self.offline} went offline before finishing, {self.inactive} drew "
                f"an inactive client){why}"
            )

    def row(self, step: Step, clock: str) -> dict[str, float]:
        """The step's columns (`clock` names its time's column)."""
        staleness = [u.staleness for u in step.updates]
        losses = [(u.weight, self.losses.get(u.task.task_id, math.nan)) for u in step.updates]
        return {
            "participants": len(step.updates),
            "failures": self.failed + self.offline,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "train_loss": weighted_mean((w, loss) for w, loss in losses if math.isfinite(loss)),
            clock: step.time,
            "staleness_mean": float(np.mean(staleness)),
            "staleness_max": max(staleness),
            "dropped_stale": step.dropped,
        }

    def next(self) -> StepTally:
        """A fresh count for the next step; replies that came but are not yet taken stay."""
        return StepTally(outcomes=self.outcomes)
