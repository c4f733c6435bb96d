"""What a resumed asynchronous run does with the tasks its checkpoint had in flight: in
simulation it sends them again (the virtual clock makes their replies the same); on real nodes
(the wall clock) they are lost, said so, and the clock goes on from the stopped run's count."""

from __future__ import annotations

import time

import numpy as np
from flwr.app import ArrayRecord

from fl_system.heterogeneity.timeline import Task
from server_app.async_clocks import WallTimes
from server_app.async_state import AsyncState, encode
from server_app.async_steps import AsyncSettings, AsyncSteps


def _steps() -> AsyncSteps:
    return AsyncSteps(
        AsyncSettings(concurrency=3, buffer_size=2, max_staleness=None),
        lambda current, updates: current,
        WallTimes(),
        seed=0,
        timeout=60.0,
    )


def test_on_real_nodes_the_tasks_in_flight_are_lost_and_the_wall_clock_goes_on() -> None:
    tasks = [Task(4, 1, 2, 10.0, 10.0), Task(5, 0, 3, 11.0, 11.0, steps=2)]
    state = AsyncState(version=3, now=12.5, sent=6, tasks=tasks, starts={2: [np.ones(2)]})
    steps = _steps()
    said = steps.load_state_dict(encode(state))
    assert said == "2 tasks in flight at the stop are lost; new ones take over"
    loop = steps._loop(ArrayRecord([np.zeros(2)]))  # built at the first step
    assert (loop.version, loop.now, len(loop.timeline), loop.timeline.sent) == (3, 12.5, 0, 6)
    assert steps._resend == []
    before = time.monotonic()
    assert 12.5 <= steps.times.now() <= 12.5 + (time.monotonic() - before) + 0.01


def test_a_checkpoint_before_the_first_step_resumes_from_scratch() -> None:
    steps = _steps()
    assert steps.load_state_dict({}) is None
    assert steps._loop(ArrayRecord([np.zeros(2)])).version == 0
