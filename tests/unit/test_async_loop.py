"""The asynchronous server loop, driven by hand in virtual time: which updates each step
takes, their staleness, when, and the model after each step, exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fl_system.learning.aggregation import weighted_average
from fl_system.learning.staleness import staleness_weight
from server_app.async_loop import AsyncLoop, Step, Update
from server_app.async_state import AsyncState, decode, encode
from server_app.strategies.fedasync_math import fedasync_step
from server_app.strategies.fedbuff_math import fedbuff_step


def fedbuff(kind: str, a: float = 0.5, eta: float = 1.0):
    def rule(current: list[np.ndarray], updates: list[Update]) -> list[np.ndarray]:
        return fedbuff_step(
            current,
            [u.model for u in updates],
            [u.start for u in updates],
            [u.weight for u in updates],
            [staleness_weight(u.staleness, kind, a=a) for u in updates],
            eta,
        )

    return rule


def drive(loop: AsyncLoop, seconds: dict[int, float], train, steps: int) -> list[Step]:
    """Fill free slots (lowest idle partition first) once every task ending now is taken;
    each client replies at once, finishing `seconds[p]` after it starts; take until `steps`
    steps."""
    made: list[Step] = []
    while len(made) < steps:
        if loop.ready_to_send():
            idle = sorted(set(seconds) - loop.timeline.busy())
            for partition in idle[: loop.free_slots]:
                task = loop.send(partition, loop.now + seconds[partition])  # from loop.model
                loop.arrived(task.task_id, task.earliest, train(partition, loop.model), 1.0)
        taken = loop.take_next()
        assert taken is not None  # every reply is in: the next task is always certain
        if taken[1] is not None:
            made.append(taken[1])
    return made


def test_three_clients_of_one_two_and_three_seconds_with_a_buffer_of_two() -> None:
    """Client p adds d_p to the model it starts from; s = 1 / (1 + staleness) (polynomial,
    a = 1), equal weights, eta = 1: x+ = x + sum_i s_i d_i / 2.

    t=1: client 0 done (from v0); it starts again from v0 (client 1 is not done yet).
    t=2: client 1 (fresh) completes the buffer: v1 = (1, 0)/2 + (0, 1)/2 = (0.5, 0.5);
         client 0's second task (from v0, staleness 1) is taken after it (sent later).
    t=3: client 2 (from v0, staleness 1): v2 = v1 + (1, 0)/4 + (4, 4)/4 = (1.75, 1.5);
         client 0's third task (from v1, staleness 1) is buffered.
    t=4: client 1's second task (from v1, staleness 1) ties with client 0's fourth and was
         sent first: v3 = v2 + (1, 0)/4 + (0, 1)/4 = (2, 1.75); then client 0's (from v2,
         staleness 1) is buffered.
    t=5: client 0 (from v3, fresh): v4 = v3 + (1, 0)/4 + (1, 0)/2 = (2.75, 1.75)."""
    moves = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([4.0, 4.0])}
    loop = AsyncLoop([np.zeros(2)], concurrency=3, buffer_size=2, max_staleness=None,
                     rule=fedbuff("polynomial", a=1.0))  # fmt: skip
    steps = drive(loop, {0: 1.0, 1: 2.0, 2: 3.0}, lambda p, x: [x[0] + moves[p]], steps=4)
    assert [s.time for s in steps] == [2.0, 3.0, 4.0, 5.0]
    assert [s.version for s in steps] == [1, 2, 3, 4]
    taken = [[(u.task.partition, u.task.version, u.staleness) for u in s.updates] for s in steps]
    assert taken == [
        [(0, 0, 0), (1, 0, 0)],
        [(0, 0, 1), (2, 0, 1)],
        [(0, 1, 1), (1, 1, 1)],
        [(0, 2, 1), (0, 3, 0)],
    ]
    models = [(0.5, 0.5), (1.75, 1.5), (2.0, 1.75), (2.75, 1.75)]
    assert [tuple(s.model[0]) for s in steps] == models
    assert [s.dropped for s in steps] == [0, 0, 0, 0]


def test_a_buffer_of_every_client_with_equal_times_is_a_synchronous_fedavg_round() -> None:
    """buffer_size = concurrency = 4 clients, 1 s each, constant staleness, eta = 1: every
    update is fresh and each step is FedAvg's weighted average of the four, to the bit."""
    rng = np.random.default_rng(0)
    shapes = [(3, 2), (2,)]
    targets = {p: [rng.standard_normal(s).astype(np.float32) for s in shapes] for p in range(4)}
    sizes = {0: 40.0, 1: 13.0, 2: 7.0, 3: 29.0}

    def train(p: int, x: list[np.ndarray]) -> list[np.ndarray]:
        return [(0.5 * a + 0.5 * t).astype(np.float32) for a, t in zip(x, targets[p], strict=True)]

    start = [np.zeros(s, dtype=np.float32) for s in shapes]
    loop = AsyncLoop(start, concurrency=4, buffer_size=4, max_staleness=0, rule=fedbuff("constant"))
    made: list[Step] = []
    while len(made) < 3:
        if loop.ready_to_send():
            for p in sorted(set(sizes) - loop.timeline.busy()):
                task = loop.send(p, loop.now + 1.0)
                loop.arrived(task.task_id, task.earliest, train(p, loop.model), sizes[p])
        _, step = loop.take_next()
        if step is not None:
            made.append(step)
    synchronous = start
    for step in made:
        assert [u.staleness for u in step.updates] == [0, 0, 0, 0]
        synchronous = weighted_average(
            [train(p, synchronous) for p in range(4)], list(sizes.values())
        )
        for got, want in zip(step.model, synchronous, strict=True):
            np.testing.assert_array_equal(got, want)


def test_updates_beyond_max_staleness_are_dropped_and_counted() -> None:
    """Buffer 1: client 0 (1 s) steps at t=1, 2, 3; client 1 (3.5 s, from v0) arrives at
    t=3.5 with staleness 3 > 2: dropped, counted in the next step."""
    loop = AsyncLoop([np.zeros(1)], concurrency=2, buffer_size=1, max_staleness=2,
                     rule=fedbuff("constant"))  # fmt: skip
    steps = drive(loop, {0: 1.0, 1: 3.5}, lambda p, x: [x[0] + 1.0], steps=4)
    assert [(s.time, s.dropped) for s in steps] == [(1.0, 0), (2.0, 0), (3.0, 0), (4.0, 1)]
    assert loop.dropped == 0


def test_fedasync_steps_on_every_update_with_alpha_times_s() -> None:
    """Buffer 1, alpha = 0.5, polynomial a = 1. Client 0 (1 s) and client 1 (2 s), each
    replying with the model it started from plus 4. t=1: v1 = 0.5*0 + 0.5*4 = 2.
    t=2: client 1 (from v0, staleness 1, alpha_t = 0.25) ties with client 0's second task
    and was sent first: v2 = 0.75*2 + 0.25*4 = 2.5; then client 0 (from v1, staleness 1):
    v3 = 0.75*2.5 + 0.25*6 = 3.375."""

    def rule(current: list[np.ndarray], updates: list[Update]) -> list[np.ndarray]:
        (update,) = updates
        alpha_t = 0.5 * staleness_weight(update.staleness, "polynomial", a=1.0)
        return fedasync_step(current, update.model, alpha_t)

    loop = AsyncLoop([np.zeros(1)], concurrency=2, buffer_size=1, max_staleness=None, rule=rule)
    steps = drive(loop, {0: 1.0, 1: 2.0}, lambda p, x: [x[0] + 4.0], steps=3)
    assert [float(s.model[0][0]) for s in steps] == [2.0, 2.5, 3.375]
    assert [[u.staleness for u in s.updates] for s in steps] == [[0], [1], [1]]


def test_a_lost_task_frees_its_slot_and_a_full_loop_refuses_another() -> None:
    loop = AsyncLoop([np.zeros(1)], concurrency=1, buffer_size=1, max_staleness=None,
                     rule=fedbuff("constant"))  # fmt: skip
    task = loop.send(0, 1.0)
    with pytest.raises(ValueError, match="all 1 slots are busy"):
        loop.send(1, 1.0)
    assert loop.lost(task.task_id) == task and loop.free_slots == 1
    assert loop.take_next() is None
    with pytest.raises(ValueError, match="concurrency and buffer_size must be >= 1, got 0 and 1"):
        AsyncLoop([np.zeros(1)], concurrency=0, buffer_size=1, max_staleness=None,
                  rule=fedbuff("constant"))  # fmt: skip


def test_a_task_that_comes_to_nothing_frees_its_slot_at_its_time_in_turn() -> None:
    """Client 0's task (1 s) comes to nothing (offline at t = 1); client 1's (2 s) replies:
    the slot of client 0 frees at t = 1, before client 1's update is taken at t = 2."""
    loop = AsyncLoop([np.zeros(1)], concurrency=2, buffer_size=1, max_staleness=None,
                     rule=fedbuff("constant"))  # fmt: skip
    lost, kept = loop.send(0, 1.0), loop.send(1, 2.0)
    loop.arrived(kept.task_id, 2.0, [np.ones(1)], 1.0)
    assert loop.take_next() is None  # client 0 could still reply before t = 2
    loop.arrived(lost.task_id, 1.0, None)
    assert loop.take_next() == (replace(lost, finish=1.0), None)
    assert loop.now == 1.0 and loop.free_slots == 1 and loop.version == 0
    _, step = loop.take_next()
    assert step is not None and step.time == 2.0 and step.model[0][0] == 1.0


def test_a_loop_restored_from_its_checkpoint_goes_on_as_the_one_that_never_stopped() -> None:
    """The three-client run above, checkpointed after its second step (through the
    checkpoint's arrays) and restored into a fresh loop: its tasks in flight, replied to again
    from the models they started from, give the same last two steps, models and staleness."""
    moves = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([4.0, 4.0])}
    seconds = {0: 1.0, 1: 2.0, 2: 3.0}

    def train(p: int, x: list[np.ndarray]) -> list[np.ndarray]:
        return [x[0] + moves[p]]

    def fresh(model: list[np.ndarray]) -> AsyncLoop:
        return AsyncLoop(model, concurrency=3, buffer_size=2, max_staleness=None,
                         rule=fedbuff("polynomial", a=1.0))  # fmt: skip

    straight = fresh([np.zeros(2)])
    drive(straight, seconds, train, steps=2)
    stopped = fresh([np.zeros(2)])
    drive(stopped, seconds, train, steps=2)
    line = stopped.timeline
    saved = AsyncState(stopped.version, stopped.now, line.sent, line.in_flight, stopped.starts())

    state = decode(encode(saved))
    assert state is not None and (state.version, state.now, state.sent) == (2, 3.0, 6)
    assert [(t.partition, t.version) for t in state.tasks] == [(0, 1), (1, 1)]
    assert set(state.starts) == {1}  # version 2 is the model itself
    resumed = fresh([stopped.model[0].copy()])
    resumed.restore(state.version, state.now, state.tasks, state.sent, state.starts)
    for task in resumed.timeline.in_flight:
        model = train(task.partition, resumed.start_model(task.version))
        resumed.arrived(task.task_id, task.start + seconds[task.partition], model, 1.0)
    want, got = drive(straight, seconds, train, 2), drive(resumed, seconds, train, 2)
    assert [tuple(s.model[0]) for s in got] == [tuple(s.model[0]) for s in want]
    assert [tuple(s.model[0]) for s in got] == [(2.0, 1.75), (2.75, 1.75)]
    assert [[u.staleness for u in s.updates] for s in got] == [[1, 1], [1, 0]]
    with pytest.raises(ValueError, match="only a loop that has not started"):
        resumed.restore(state.version, state.now, state.tasks, state.sent, state.starts)
    with pytest.raises(ValueError, match=r"the models of versions \[1\] are not in"):
        fresh([np.zeros(2)]).restore(2, 3.0, state.tasks, state.sent, {})
