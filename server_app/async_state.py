"""An asynchronous run's place in a checkpoint, taken after a server step: the version and
virtual time, how many tasks were sent (the draws and task numbers go on from there), the
tasks in flight (who, from which version, since when, how many steps) and the older models
they started from.

A resumed simulation sends those tasks again, from the same models with the same seeds, so
their replies, and the run, are the ones the stopped run would have had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fl_system.heterogeneity.timeline import Task

PREFIX = "async/"
_STARTS = f"{PREFIX}start/"  # async/start/<version>/<layer index>
_COLUMNS = 6  # a task in flight: id, partition, version, start, earliest, steps (-1: E)


@dataclass(frozen=True)
class AsyncState:
    """Where an asynchronous run stood after a step (the model is the checkpoint's own)."""

    version: int
    now: float
    sent: int
    tasks: list[Task]
    starts: dict[int, list[np.ndarray]]


def encode(state: AsyncState) -> dict[str, np.ndarray]:
    """`state` as named arrays for the checkpoint (integers and times exact in float64)."""
    rows = [
        [t.task_id, t.partition, t.version, t.start, t.earliest, -1 if t.steps is None else t.steps]
        for t in state.tasks
    ]
    out = {
        f"{PREFIX}version": np.array(state.version),
        f"{PREFIX}now": np.array(state.now),
        f"{PREFIX}tasks_sent": np.array(state.sent),
        f"{PREFIX}tasks": np.array(rows, dtype=np.float64).reshape(len(rows), _COLUMNS),
    }
    for version, model in state.starts.items():
        out.update({f"{_STARTS}{version}/{i}": layer for i, layer in enumerate(model)})
    return out


def decode(saved: Mapping[str, np.ndarray]) -> AsyncState | None:
    """The state `encode` wrote (None: the checkpoint has none, e.g. before the first step)."""
    if f"{PREFIX}version" not in saved:
        return None
    tasks = [
        Task(int(i), int(p), int(v), float(s), float(e), steps=None if n < 0 else int(n))
        for i, p, v, s, e, n in np.asarray(saved[f"{PREFIX}tasks"]).reshape(-1, _COLUMNS)
    ]
    layers: dict[int, dict[int, np.ndarray]] = {}
    for key, value in saved.items():
        if key.startswith(_STARTS):
            version, index = key[len(_STARTS) :].split("/")
            layers.setdefault(int(version), {})[int(index)] = np.asarray(value)
    return AsyncState(
        version=int(saved[f"{PREFIX}version"]),
        now=float(saved[f"{PREFIX}now"]),
        sent=int(saved[f"{PREFIX}tasks_sent"]),
        tasks=tasks,
        starts={v: [by_index[i] for i in sorted(by_index)] for v, by_index in layers.items()},
    )
