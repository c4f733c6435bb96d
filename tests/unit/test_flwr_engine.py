"""The simulation engine's hooks into flwr 1.42 (fl_system.flower.flwr_engine)."""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections import deque

import flwr.server.superlink.fleet.vce.vce_api as flwr_engine_module
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.linkstate import InMemoryLinkState, LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid import InMemoryGrid

from fl_system.flower import FlwrInternalsChanged, flwr_engine
from fl_system.runtime import flwr_check


def _changed(monkeypatch: pytest.MonkeyPatch, target: str, value: object) -> str:
    """check()'s message after replacing `target` (undone after the test), which flwr_hooks'
    full check reports too."""
    monkeypatch.setattr(target, value)
    with pytest.raises(FlwrInternalsChanged) as raised:
        flwr_engine.check()
    with pytest.raises(FlwrInternalsChanged):
        flwr_check.check()
    return str(raised.value)


def test_check_passes_on_the_pinned_flwr() -> None:
    flwr_engine.check()


def test_a_changed_simulation_pickup_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime=simulation replaces the engine's 0.1 s message sweep; a new sweep must be seen."""

    def add_messages_to_queue(state: object, queue: object, nodes: object, f_stop: object) -> None:
        raise AssertionError("never called")

    message = _changed(
        monkeypatch,
        "flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue",
        add_messages_to_queue,
    )
    assert "the simulation engine no longer picks messages up as it did" in message


def test_a_simulation_grid_storing_otherwise_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation's pickup wakes on store_message_ins; a grid that bypasses it must be seen."""

    def push_messages(self: object, messages: object) -> list[str]:
        raise AssertionError("never called")

    message = _changed(monkeypatch, "flwr.superlink.grid.InMemoryGrid.push_messages", push_messages)
    assert "no longer stores messages with store_message_ins" in message


def test_a_simulation_engine_taking_its_backend_otherwise_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runtime.backend=process swaps run_api's backend_fn; a run_api without it must be seen."""

    def run_api(app_fn: object, backend: object, nodes_mapping: object) -> None:
        raise AssertionError("never called")

    message = _changed(monkeypatch, "flwr.server.superlink.fleet.vce.vce_api.run_api", run_api)
    assert "run_api no longer takes (app_fn, backend_fn, ...)" in message


def test_the_simulation_backend_is_swapped_in_run_api(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")
    seen: list[object] = []
    monkeypatch.setattr(
        engine, "run_api", lambda app_fn, backend_fn, *rest: seen.append(backend_fn)
    )
    ours = object()
    flwr_engine.simulation_backend(lambda: ours)
    engine.run_api("app", "flower's RayBackend factory", "nodes")
    assert seen[0]() is ours


def test_simulation_loads_apps_by_reference_on_the_pinned_flwr() -> None:
    flwr_engine.simulation_by_reference()


def test_a_simulation_entry_without_app_references_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runtime=simulation names the apps by reference; an entry that cannot must be seen."""

    def _run_simulation(num_supernodes: int, server_app: object, client_app: object) -> None:
        raise AssertionError("never called")

    entry = importlib.import_module("flwr.simulation.run_simulation")
    monkeypatch.setattr(entry, "_run_simulation", _run_simulation)
    with pytest.raises(FlwrInternalsChanged, match="no longer takes app_dir, client_app_attr"):
        flwr_engine.simulation_by_reference()


def test_the_simulation_engines_threads_end_as_soon_as_the_run_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flower's reply thread waits up to 1 s on its queue between looks at the stop event;
    with the hook it ends within a few STOP_CHECK_SECONDS of the stop."""
    engine = importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")
    monkeypatch.setattr(engine, "worker", engine.worker)  # undone after the test
    monkeypatch.setattr(engine, "put_message_into_state", engine.put_message_into_state)
    flwr_engine.simulation_stops_at_once()
    f_stop = threading.Event()
    thread = threading.Thread(
        target=engine.put_message_into_state, args=(object(), queue.Queue(), f_stop)
    )
    thread.start()
    time.sleep(0.2)
    stopped = time.monotonic()
    f_stop.set()
    thread.join(2)
    assert not thread.is_alive()
    assert time.monotonic() - stopped < 0.5  # Flower alone: up to 1 s


def test_a_stop_aware_wait_still_returns_what_arrives_and_times_out_as_asked() -> None:
    waiting: queue.Queue[str] = queue.Queue()
    get = flwr_engine._stop_aware(waiting.get, threading.Event())
    threading.Timer(0.15, waiting.put, args=("reply",)).start()
    assert get(timeout=1.0) == "reply"
    started = time.monotonic()
    with pytest.raises(queue.Empty):
        get(timeout=0.3)
    assert 0.25 < time.monotonic() - started < 0.6


def test_a_simulation_worker_waiting_otherwise_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def worker(messageins_queue: object, messageres_queue: object, node_info_store: object,
               backend: object, f_stop: object, metrics: object) -> None:  # fmt: skip
        raise AssertionError("never called")

    message = _changed(monkeypatch, "flwr.server.superlink.fleet.vce.vce_api.worker", worker)
    assert "worker no longer waits on messageins_queue.get" in message


def test_a_state_delivering_otherwise_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pickup delivers from the in-memory state's store as get_message_ins does."""

    def get_message_ins(self: object, node_id: int, limit: int | None) -> list[Message]:
        raise AssertionError("never called")

    message = _changed(
        monkeypatch,
        "flwr.server.superlink.linkstate.InMemoryLinkState.get_message_ins",
        get_message_ins,
    )
    assert "the in-memory state no longer delivers messages as it did" in message


# ----- simulation pickup -------------------------------------------------------------------
def _federation(num_nodes: int) -> tuple[InMemoryLinkState, InMemoryGrid, dict[int, int]]:
    """Flower's in-memory state, grid and virtual nodes, set up as `_run_simulation` does."""
    factory = LinkStateFactory(
        FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory()
    )
    state = factory.state()
    run = Run.create_empty(run_id=7)
    run.primary_task_id = 11
    run.federation_id = NOOP_FEDERATION_ID
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[run.primary_task_id] = Task(task_id=run.primary_task_id, run_id=run.run_id)
    grid = InMemoryGrid(state_factory=factory)
    grid.set_run(run)
    TaskIdentity.run_id, TaskIdentity.task_id = run.run_id, run.primary_task_id  # its ServerApp's
    return state, grid, flwr_engine_module._register_nodes(num_nodes, factory)


def _to(node: int, text: str) -> Message:
    content = RecordDict({"c": ConfigRecord({"text": text})})
    return Message(content=content, dst_node_id=node, message_type="query")


def _text(message: Message) -> str:
    return str(message.content.config_records["c"]["text"])


def test_stored_messages_are_picked_up_at_once_one_per_node_per_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the fallback sweep pushed out to an hour, only a store can wake the pickup; a
    node's second message waits for the next pass, and every delivered message is marked as
    Flower's own sweep marks it (the state hands it out once)."""
    monkeypatch.setattr(flwr_engine, "SIMULATION_PICKUP", 3600.0)
    monkeypatch.setattr(
        flwr_engine_module, "add_messages_to_queue", flwr_engine_module.add_messages_to_queue
    )
    flwr_engine.simulation_pickup_on_store()
    state, grid, nodes = _federation(3)
    first, second, third = nodes
    early = list(grid.push_messages([_to(third, "before the pickup started")]))
    picked: queue.Queue[Message] = queue.Queue()
    stop = threading.Event()
    sweeper = threading.Thread(
        target=flwr_engine_module.add_messages_to_queue, args=(state, picked, nodes, stop)
    )
    sweeper.start()
    try:
        assert _text(picked.get(timeout=30)) == "before the pickup started"
        grid.push_messages([_to(second, "m1")])
        assert _text(picked.get(timeout=30)) == "m1"
        grid.push_messages([_to(first, "m2"), _to(first, "m3"), _to(second, "m4")])
        got = [_text(picked.get(timeout=30)) for _ in range(3)]
        assert got.index("m2") < got.index("m3") and sorted(got) == ["m2", "m3", "m4"]
        assert picked.empty()
        assert all(not state.get_message_ins(node_id=n, limit=None) for n in nodes)
        assert early and state.message_ins_store[early[0]].metadata.delivered_at != ""
    finally:
        stop.set()
        grid.push_messages([_to(first, "wake")])  # the pass's wait ends on a store, too
        sweeper.join(timeout=30)
    assert not sweeper.is_alive()


def test_a_pass_holds_back_a_nodes_second_message_and_drops_expired_ones() -> None:
    state, grid, nodes = _federation(2)
    first, second = nodes
    expired = _to(second, "expired")
    expired.metadata.ttl = 1e-3
    grid.push_messages([_to(first, "a"), _to(first, "b"), expired])
    time.sleep(0.01)
    noted = flwr_engine._undelivered(state)
    picked: queue.Queue[Message] = queue.Queue()
    pending = deque(noted)
    assert flwr_engine._deliver(state, pending, nodes, picked)
    assert [_text(picked.get_nowait())] == ["a"] and picked.empty()
    assert flwr_engine._deliver(state, pending, nodes, picked)
    assert [_text(picked.get_nowait())] == ["b"]
    assert not flwr_engine._deliver(state, pending, nodes, picked)  # the expired one is gone
    assert not pending
