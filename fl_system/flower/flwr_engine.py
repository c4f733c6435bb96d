"""Flower's simulation engine as fl_system runs it: what we rely on inside flwr 1.42's
`vce_api` and `run_simulation`, which are not public API.

- the apps are loaded by their component references, with the run config in the
  ServerApp's context (`_run_simulation`, which `flwr run` uses; the public `run_simulation`
  takes neither);
- the ClientApps may run on forked workers instead of Ray (`simulation_backend`);
- the engine's threads end as soon as the run does (`simulation_stops_at_once`);
- a message is picked up when it is stored, in one pass over the new messages, not by
  Flower's 0.1 s sweep that asks the state for every node in turn (`simulation_pickup_on_store`).

`problems()` verifies that the pinned flwr still has all of this (`runtime.flwr_check.check()` and
`check()`, which the engine calls at start-up).
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, Queue
from threading import Event
from types import ModuleType
from typing import TYPE_CHECKING

from fl_system.flower import FlwrInternalsChanged, raise_if

if TYPE_CHECKING:
    from flwr.app import Message
    from flwr.server.superlink.fleet.vce.backend import Backend
    from flwr.server.superlink.linkstate import InMemoryLinkState, LinkState

SIMULATION_PICKUP = 0.1  # flwr's simulation engine looks for new messages this often


def check() -> None:
    """Raise FlwrInternalsChanged naming what moved; the engine's process needs none of
    flwr_hooks' other checks (importing the node's and the SuperLink's modules costs ~1 s)."""
    raise_if(problems())


def problems() -> list[str]:
    from flwr.superlink.grid import InMemoryGrid

    found = []
    pickup = inspect.getsource(_simulation_engine().add_messages_to_queue)
    if f"f_stop.wait({SIMULATION_PICKUP})" not in pickup or "get_message_ins" not in pickup:
        found.append("the simulation engine no longer picks messages up as it did")
    if "store_message_ins" not in inspect.getsource(InMemoryGrid.push_messages):
        found.append("the simulation's grid no longer stores messages with store_message_ins")
    return found + _delivery_problems() + _backend_problems() + _stop_problems()


def _simulation_engine() -> ModuleType:
    """Flower's simulation engine, imported when used: it brings the SuperLink's in-memory
    state (SQLAlchemy, Alembic: ~0.5 s), which ServerApps and fl-run never need."""
    return importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")


def simulation_by_reference() -> Callable[..., object]:
    """Flower's `_run_simulation`: it loads the apps by component reference and runs the
    ServerApp with a given context (imported here: it brings Ray, which nodes do not need)."""
    from flwr.simulation.run_simulation import _run_simulation

    loads = {"server_app_attr", "client_app_attr", "server_app_context", "app_dir"}
    if not loads <= set(inspect.signature(_run_simulation).parameters):
        raise FlwrInternalsChanged(
            "the installed flwr's _run_simulation no longer takes " + ", ".join(sorted(loads))
        )
    return _run_simulation


def simulation_backend(make: Callable[[], Backend]) -> None:
    """Run the simulation's ClientApps on the backend `make` builds instead of Ray.

    Flower's `start_vce` always builds a `RayBackend` (its `backend_name` is only checked),
    in a local function that it hands to `run_api` as `backend_fn`: that argument is swapped.
    """
    engine = _simulation_engine()
    run_api = engine.run_api

    def run_api_on_our_backend(app_fn: Callable[..., object], _: object, *args: object) -> None:
        run_api(app_fn, make, *args)

    engine.run_api = run_api_on_our_backend


def _backend_problems() -> list[str]:
    engine = _simulation_engine()
    params = list(inspect.signature(engine.run_api).parameters)
    if params[:2] != ["app_fn", "backend_fn"]:
        return ["the simulation engine's run_api no longer takes (app_fn, backend_fn, ...)"]
    if "backend_fn,\n" not in inspect.getsource(engine.start_vce):
        return ["start_vce no longer hands run_api its backend_fn"]
    return []


def simulation_worker(worker: Callable[..., None]) -> None:
    """Run `worker` as the simulation engine's worker (Flower starts `backend.num_workers` of
    them, each with the arguments of its own `worker`); before `simulation_stops_at_once`,
    which wraps the engine's worker as it finds it."""
    _simulation_engine().worker = worker


STOP_CHECK_SECONDS = 0.05  # how soon the engine's idle threads see that the run ended


def simulation_stops_at_once() -> None:
    """Make the simulation engine's threads end as soon as the run ends.

    Its workers and its reply thread wait up to 1 s on their queues before they look at the
    stop event again, so every run ended about a second after its last line (a second per
    member of a sweep). Their queue waits are cut into STOP_CHECK_SECONDS slices that end
    once the stop event is set; nothing else about them changes.
    """
    engine = _simulation_engine()
    worker, put_message_into_state = engine.worker, engine.put_message_into_state

    def stopping_worker(messageins_queue: Queue[Message], *args: object) -> None:
        f_stop = args[3]
        assert isinstance(f_stop, Event)
        messageins_queue.get = _stop_aware(messageins_queue.get, f_stop)  # type: ignore[method-assign]
        worker(messageins_queue, *args)

    def stopping_put(state: LinkState, queue: Queue[Message], f_stop: Event) -> None:
        queue.get = _stop_aware(queue.get, f_stop)  # type: ignore[method-assign]
        put_message_into_state(state, queue, f_stop)

    engine.worker = stopping_worker
    engine.put_message_into_state = stopping_put


def _stop_aware(get: Callable[..., Message], f_stop: Event) -> Callable[..., Message]:
    def get_until_stopped(timeout: float) -> Message:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return get(timeout=min(STOP_CHECK_SECONDS, max(deadline - time.monotonic(), 0)))
            except Empty:
                if f_stop.is_set() or time.monotonic() >= deadline:
                    raise

    return get_until_stopped


def _stop_problems() -> list[str]:
    engine = _simulation_engine()
    problems = []
    if list(inspect.signature(engine.worker).parameters)[:6] != [
        "messageins_queue",
        "messageres_queue",
        "node_info_store",
        "backend",
        "f_stop",
        "metrics",
    ]:
        problems.append("the simulation engine's worker takes other arguments")
    if "messageins_queue.get(timeout=" not in inspect.getsource(engine.worker):
        problems.append("the simulation engine's worker no longer waits on messageins_queue.get")
    if "queue.get(timeout=" not in inspect.getsource(engine.put_message_into_state):
        problems.append("put_message_into_state no longer waits on queue.get")
    return problems


def simulation_pickup_on_store() -> None:
    """Make Flower's simulation engine pick a message up as soon as the ServerApp stores it.

    The engine sweeps every node for messages every 0.1 s, and each node's look scans every
    stored message: a round's messages wait for the next sweep, and a sweep costs nodes x
    messages (with 10,000 virtual clients, each sent a handshake, a single sweep took minutes).
    Instead the messages are noted as they are stored, and a pass delivers the noted ones
    (one per node per pass, in the order stored, as Flower's sweep does) when a store wakes
    it, and again while it finds any, with Flower's 0.1 s as the fallback.
    """

    def add_messages_to_queue(
        state: InMemoryLinkState,
        queue: Queue[Message],
        nodes_mapping: dict[int, int],
        f_stop: Event,
    ) -> None:
        stored = Event()
        noted: deque[tuple[int, str]] = deque()  # (node, message id), in the order stored
        store_message_ins = state.store_message_ins

        def store_and_wake(message: Message) -> object:
            message_id = store_message_ins(message)
            if message_id is not None:
                noted.append((message.metadata.dst_node_id, str(message_id)))
                stored.set()
            return message_id

        state.store_message_ins = store_and_wake  # type: ignore[method-assign]
        # and those stored before the wrap, ahead (one stored during this look is noted twice;
        # its second turn finds it delivered)
        noted.extendleft(reversed(_undelivered(state)))
        while not f_stop.is_set():
            stored.clear()  # before the pass: a message stored during it wakes the next one
            if not _deliver(state, noted, nodes_mapping, queue):
                stored.wait(SIMULATION_PICKUP)

    _simulation_engine().add_messages_to_queue = add_messages_to_queue


def _undelivered(state: InMemoryLinkState) -> list[tuple[int, str]]:
    """(node, message id) of every message waiting in `state`, in the order stored."""
    with state.lock:
        return [
            (message.metadata.dst_node_id, message_id)
            for message_id, message in state.message_ins_store.items()
            if message.metadata.delivered_at == ""
        ]


def _deliver(
    state: InMemoryLinkState,
    noted: deque[tuple[int, str]],
    nodes: dict[int, int],
    queue: Queue[Message],
) -> bool:
    """Queue the first noted message of each node, marked delivered as Flower's
    `get_message_ins` marks it (an expired one, or one outside the federation, is dropped by
    the state's own check); the others stay noted for the next pass. Whether any was queued."""
    from flwr.supercore.date import now

    taken: dict[int, Message] = {}
    later: list[tuple[int, str]] = []
    with state.lock:
        while noted:
            node, message_id = noted.popleft()
            if node in taken:
                later.append((node, message_id))
                continue
            if node not in nodes:
                continue  # not one of this engine's nodes: Flower's sweep never asks for it
            state._check_stored_messages({message_id})
            message = state.message_ins_store.get(message_id)
            if message is not None and message.metadata.delivered_at == "":
                taken[node] = message
        delivered_at = now().isoformat()
        for message in taken.values():
            message.metadata.delivered_at = delivered_at
    noted.extendleft(reversed(later))  # ahead of anything stored meanwhile
    for message in taken.values():
        queue.put(message)
    return bool(taken)


def _delivery_problems() -> list[str]:
    from flwr.server.superlink.linkstate import InMemoryLinkState

    source = inspect.getsource(InMemoryLinkState.get_message_ins)
    wanted = ("self._check_stored_messages({msg_id})", "self.message_ins_store", "delivered_at")
    if not all(part in source for part in wanted):
        return ["the in-memory state no longer delivers messages as it did"]
    return []
