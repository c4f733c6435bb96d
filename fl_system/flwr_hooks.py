"""Everything we rely on inside flwr 1.36 that is not public API, in one place.

Flower's protocol stays as it is: the SuperNode pulls messages over gRPC, stores each one as a
task, a SuperExec-style launcher claims the task for a token, and the ClientApp runs Flower's
own `run_clientapp` with that token against the SuperNode's Runtime API. What we change is
only *how fast* that happens:

- the SuperNode's fixed sleeps (3 s after an empty pull, 0.5 s while waiting for a reply) are
  replaced by a `PollSchedule`, by swapping the `time` module seen by
  `flwr.supernode.start_client_internal`;
- the launcher claims tasks and starts each app in a forked child instead of a fresh
  `flwr-clientapp` / `flwr-serverapp` interpreter, installs the FAB once per machine and
  hash, and answers for a killed ClientApp at once (`fl_system.flwr_tasks`, checked here too);
- the simulation engine picks a message up when it is stored, not at its next 0.1 s sweep,
  may run its ClientApps on forked workers instead of Ray (`simulation_backend`), and
  loads the apps by their component references with the run config in the ServerApp's context
  (`_run_simulation`, which `flwr run` uses; the public `run_simulation` takes neither);
- bytes on the wire are counted on Flower's own content-addressed objects;
- a reply whose sender dies while uploading it is given up once the sender is offline, not
  after Flower's 180 s object-push session (which also blocked every other reply);
- a SuperNode may promise heartbeats more often than Flower's 30 s (and our SuperLink accepts
  down to MIN_HEARTBEAT s instead of 10), so a killed node is reported unavailable in seconds.

`check()` verifies that the pinned flwr still has all of this; the node, the launcher and the
simulation call it at start-up, and a unit test calls it so an flwr upgrade fails loudly.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from queue import Empty, Queue
from threading import Event
from types import ModuleType
from typing import TYPE_CHECKING

import flwr.supercore.heartbeat as flwr_heartbeat
from flwr.app import Message
from flwr.common.constant import (
    HEARTBEAT_CALL_TIMEOUT,
    HEARTBEAT_MAX_INTERVAL,
    ISOLATION_MODE_PROCESS,
)
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import (
    ObjectPullError,
    ObjectUnavailableError,
)
from flwr.supercore.inflatable.inflatable_utils import pull_objects as flwr_pull_objects
from flwr.supercore.runtime import RuntimeHttpClient

if TYPE_CHECKING:
    from flwr.server.superlink.fleet.vce.backend import Backend
    from flwr.server.superlink.linkstate import LinkState
from fl_system.supernode.polling import PollSchedule

ISOLATION = ISOLATION_MODE_PROCESS  # the SuperNode serves the Runtime API; we launch apps
IDLE_PULL_SLEEP = 3  # flwr's sleep after a pull that found no message
REPLY_SLEEP = 0.5  # flwr's sleep while waiting for the ClientApp's reply (and its objects)
SIMULATION_PICKUP = 0.1  # flwr's simulation engine looks for new messages this often


class FlwrInternalsChanged(RuntimeError):
    """The installed flwr no longer has what the fast SuperNode relies on."""


def check() -> None:
    """Raise FlwrInternalsChanged naming everything that moved in the installed flwr."""
    from fl_system import flwr_tasks

    _raise_if(
        _node_loop_problems()
        + _simulation_problems()
        + _heartbeat_problems()
        + _reply_pull_problems()
        + flwr_tasks.problems()
    )


def check_simulation() -> None:
    """check() for the simulation engine alone: its process needs none of the rest (and
    importing the node's and the SuperLink's modules to check them would cost ~1 s)."""
    _raise_if(_simulation_problems())


def _raise_if(problems: list[str]) -> None:
    if problems:
        raise FlwrInternalsChanged(
            "the installed flwr differs from the 1.36 internals fl_system relies on: "
            + "; ".join(problems)
        )


def _node_loop_problems() -> list[str]:
    problems = []
    flwr_supernode_loop = _supernode_loop()
    loop_source = inspect.getsource(flwr_supernode_loop.start_client_internal)
    push_source = inspect.getsource(flwr_supernode_loop._push_messages)
    if f"time.sleep({IDLE_PULL_SLEEP})" not in loop_source:
        problems.append(f"start_client_internal no longer sleeps time.sleep({IDLE_PULL_SLEEP})")
    if f"time.sleep({REPLY_SLEEP})" not in push_source:
        problems.append(f"_push_messages no longer sleeps time.sleep({REPLY_SLEEP})")
    if getattr(flwr_supernode_loop, "time", None) is not time:
        problems.append("start_client_internal no longer imports the time module")
    if "_pull_and_store_message(" not in loop_source:
        problems.append("start_client_internal no longer calls _pull_and_store_message")
    return problems


def _simulation_problems() -> list[str]:
    from flwr.superlink.grid import InMemoryGrid

    problems = []
    pickup = inspect.getsource(_simulation_engine().add_messages_to_queue)
    if f"f_stop.wait({SIMULATION_PICKUP})" not in pickup or "get_message_ins" not in pickup:
        problems.append("the simulation engine no longer picks messages up as it did")
    if "store_message_ins" not in inspect.getsource(InMemoryGrid.push_messages):
        problems.append("the simulation's grid no longer stores messages with store_message_ins")
    return problems + _backend_problems() + _stop_problems()


# ----- the SuperNode process ------------------------------------------------------------------
class _NodeClock:
    """Stands in for the `time` module inside Flower's SuperNode loop: schedules its sleeps."""

    def __init__(self, schedule: PollSchedule) -> None:
        self.schedule = schedule
        self.last_message = time.monotonic()  # a node that just started expects work soon

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds == IDLE_PULL_SLEEP:
            seconds = self.schedule.wait(time.monotonic() - self.last_message)
        elif seconds == REPLY_SLEEP:
            seconds = self.schedule.reply
        time.sleep(seconds)


def install_poll_schedule(schedule: PollSchedule, on_message: Callable[[], None]) -> None:
    """Make this process's SuperNode loop poll by `schedule` and call `on_message` per message."""
    clock = _NodeClock(schedule)
    flwr_supernode_loop = _supernode_loop()
    pull = flwr_supernode_loop._pull_and_store_message

    def pull_and_store(*args: object, **kwargs: object) -> int | None:
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            clock.last_message = time.monotonic()
            on_message()
        return run_id

    flwr_supernode_loop.time = clock
    flwr_supernode_loop._pull_and_store_message = pull_and_store


def run_supernode(flower_args: list[str]) -> None:
    """Flower's `flower-supernode` main in this process, with `flower_args` as its argv."""
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *flower_args]
    flower_supernode()


# ----- heartbeats ----------------------------------------------------------------------------
MIN_HEARTBEAT = 1.0  # seconds: the shortest heartbeat interval our SuperLink accepts


def _supernode_loop() -> ModuleType:
    """The SuperNode's main loop, imported when used (~0.8 s: Flower's node stack)."""
    return importlib.import_module("flwr.supernode.start_client_internal")


def _node_connection() -> ModuleType:
    """The SuperNode's gRPC connection module, imported when used: it brings Flower's client
    stack (~0.3 s), which the ServerApp and fl-run, importing this module, never need."""
    return importlib.import_module("flwr.client.grpc_rere_client.connection")


def _fleet_handler() -> ModuleType:
    """The SuperLink's Fleet API handler, imported when used: it brings the SuperLink's
    state (SQLAlchemy, Alembic: ~0.5 s)."""
    return importlib.import_module("flwr.server.superlink.fleet.message_handler.message_handler")


def _simulation_engine() -> ModuleType:
    """Flower's simulation engine, imported when used: it brings the SuperLink's in-memory
    state (SQLAlchemy, Alembic: ~0.5 s), which ServerApps and fl-run never need."""
    return importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")


def _http_grid() -> ModuleType:
    """The ServerApp's grid, imported when used: Flower's grid package brings the in-memory
    SuperLink state (~0.5 s), which fl-run's checks never need."""
    return importlib.import_module("flwr.superlink.grid.http_grid")


def _heartbeat_problems() -> list[str]:
    problems = []
    flwr_node_connection = _node_connection()
    for module in (flwr_node_connection, flwr_heartbeat):
        for name in ("HEARTBEAT_DEFAULT_INTERVAL", "HEARTBEAT_CALL_TIMEOUT"):
            if not hasattr(module, name):
                problems.append(f"{module.__name__} no longer reads {name}")
    if "heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL" not in inspect.getsource(
        flwr_node_connection
    ):
        problems.append("the SuperNode no longer promises HEARTBEAT_DEFAULT_INTERVAL")
    sender = inspect.getsource(flwr_heartbeat.HeartbeatSender)
    if "HEARTBEAT_DEFAULT_INTERVAL - HEARTBEAT_CALL_TIMEOUT" not in sender:
        problems.append("HeartbeatSender no longer spaces heartbeats by the module's constants")
    validate = inspect.getsource(_fleet_handler()._validate_heartbeat_interval)
    if "HEARTBEAT_MIN_INTERVAL <= interval" not in validate:
        problems.append("the SuperLink no longer bounds heartbeats by HEARTBEAT_MIN_INTERVAL")
    return problems


def set_node_heartbeat(interval: float) -> None:
    """Make this process's SuperNode promise a heartbeat every `interval` seconds.

    The SuperLink reports a node unavailable (and fails its pending messages) once
    HEARTBEAT_PATIENCE (2) intervals pass without one. Flower sends one every
    (interval - call timeout) x 0.7-0.9, so the call timeout shrinks with the interval.
    """
    if not MIN_HEARTBEAT <= interval <= HEARTBEAT_MAX_INTERVAL:
        raise ValueError(
            f"heartbeat interval must be in [{MIN_HEARTBEAT}, {HEARTBEAT_MAX_INTERVAL}] s, "
            f"got {interval}"
        )
    call_timeout = min(HEARTBEAT_CALL_TIMEOUT, interval / 2)
    for module in (_node_connection(), flwr_heartbeat):
        module.HEARTBEAT_DEFAULT_INTERVAL = interval  # type: ignore[attr-defined]
        module.HEARTBEAT_CALL_TIMEOUT = call_timeout  # type: ignore[attr-defined]


def run_superlink(flower_args: list[str]) -> None:
    """Flower's `flower-superlink` main in this process, accepting heartbeat intervals down
    to MIN_HEARTBEAT seconds (Flower: 10)."""
    from flwr.superlink.cli.flower_superlink import flower_superlink

    _fleet_handler().HEARTBEAT_MIN_INTERVAL = MIN_HEARTBEAT
    sys.argv = ["flower-superlink", *flower_args]
    flower_superlink()


# ----- replies whose sender died while uploading them -----------------------------------------
SENDER_CHECK_SECONDS = 1.0  # the longest wait between tries of an object still uploading

_reply_senders: dict[str, int] = {}  # reply message id -> its sender, until its objects are pulled
_sender_online: list[Callable[[int], bool]] = []  # the check in use (set once installed)


def _reply_pull_problems() -> list[str]:
    problems = []
    if not hasattr(RuntimeHttpClient, "PullMessages"):
        problems.append("RuntimeHttpClient has no PullMessages")
    pull = inspect.getsource(_http_grid().HttpGrid.pull_messages)
    if "res.messages_list" not in pull or "pull_objects(" not in pull:
        problems.append("HttpGrid.pull_messages no longer pulls a reply's objects by pull_objects")
    if "backoff_cap" not in inspect.signature(flwr_pull_objects).parameters:
        problems.append("pull_objects no longer takes backoff_cap")
    return problems


def abandon_replies_of_dead_senders(is_online: Callable[[int], bool]) -> None:
    """Make this process's Grid give up on a reply whose sender went offline mid-upload.

    A SuperNode registers its reply, then uploads the reply's objects. The SuperLink hands the
    reply out at once and Flower's Grid waits for its objects until the push session expires
    (180 s), holding every other reply of the same pull. Here, between tries (at most
    SENDER_CHECK_SECONDS apart), the Grid asks `is_online(sender)` and, once it is not, gives
    the reply up as an error naming the sender. Calling again replaces the check.
    """
    installed = bool(_sender_online)
    _sender_online[:] = [is_online]
    if installed:
        return
    pull_messages = RuntimeHttpClient.PullMessages
    flwr_http_grid = _http_grid()
    pull_objects = flwr_http_grid.pull_objects

    def pull_and_note_senders(self: RuntimeHttpClient, request: object) -> object:
        response = pull_messages(self, request)
        for message in response.messages_list:
            _reply_senders[message.metadata.message_id] = message.metadata.src_node_id
        return response

    def pull_or_give_up(
        object_ids: list[str], pull_object_fn: Callable[[str], bytes], **kwargs: object
    ) -> dict[str, bytes]:
        sender = _reply_senders.pop(object_ids[-1], None) if object_ids else None  # root last
        if sender is None:
            return pull_objects(object_ids, pull_object_fn, **kwargs)

        def pull_one(object_id: str) -> bytes:
            try:
                return pull_object_fn(object_id)
            except ObjectUnavailableError:
                if not _sender_online[0](sender):
                    reason = f"its sender, node {sender}, went offline before uploading it"
                    raise ObjectPullError(object_id, reason) from None
                raise

        kwargs["backoff_cap"] = SENDER_CHECK_SECONDS
        return pull_objects(object_ids, pull_one, **kwargs)

    RuntimeHttpClient.PullMessages = pull_and_note_senders  # type: ignore[method-assign]
    flwr_http_grid.pull_objects = pull_or_give_up


# ----- the simulation engine ------------------------------------------------------------------
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

    The engine sweeps every node for messages every 0.1 s: a round's messages wait for the
    next sweep, and a sweep scans every stored message for every node (~0.6 ms with 10 nodes),
    so sweeping often costs CPU the clients need. Instead the sweep runs when the in-memory
    state stores a message (and again while it finds any), with Flower's 0.1 s as the fallback.
    """

    def add_messages_to_queue(
        state: LinkState, queue: Queue[Message], nodes_mapping: dict[int, int], f_stop: Event
    ) -> None:
        stored = Event()
        store_message_ins = state.store_message_ins

        def store_and_wake(message: Message) -> object:
            message_id = store_message_ins(message)
            stored.set()
            return message_id

        state.store_message_ins = store_and_wake  # type: ignore[method-assign]
        while not f_stop.is_set():
            stored.clear()  # before the sweep: a message stored during it wakes the next one
            found = False
            for node_id in nodes_mapping:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(msg)
                    found = True
            if not found:  # a sweep takes one message per node: sweep again until none is left
                stored.wait(SIMULATION_PICKUP)

    _simulation_engine().add_messages_to_queue = add_messages_to_queue


# ----- bytes on the wire ----------------------------------------------------------------------
def wire_bytes(messages: Iterable[Message]) -> int:
    """Serialized size of `messages` as they travel (`wire_sizes`, summed)."""
    return sum(size.whole for size in wire_sizes(messages))


@dataclass(frozen=True)
class WireSize:
    """One message's bytes on the wire, and those of its content alone (without the message
    object, whose metadata holds Flower's random ids: its size varies by a few bytes between
    identical runs)."""

    whole: int
    content: int


def wire_sizes(messages: Iterable[Message]) -> list[WireSize]:
    """Serialized size of each of `messages` as it travels: every object Flower moves for it.

    Flower deflates a message into content-addressed objects (message, records, array chunks)
    and moves each over gRPC; their deflated sizes are the payload on the wire. An object that
    several messages share (one global model for every node) travels once per message but is
    serialized and hashed here only once.
    """
    sizes: dict[str, int] = {}
    out = []
    with no_object_id_recompute():
        for message in messages:
            whole = content = 0
            for object_id, obj in get_all_nested_objects(message).items():
                if object_id not in sizes:
                    sizes[object_id] = len(obj.deflate())
                whole += sizes[object_id]
                content += 0 if obj is message else sizes[object_id]
            out.append(WireSize(whole, content))
    return out
