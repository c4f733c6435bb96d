"""Everything we rely on inside flwr 1.42 that is not public API, in one place.

Flower's protocol stays as it is: the SuperNode pulls messages over HTTP, stores each one as a
task, a SuperExec-style launcher claims the task for a token, and the ClientApp runs Flower's
own `run_clientapp` with that token against the SuperNode's Runtime API. What we change is
only *how fast* that happens:

- the SuperNode's fixed sleeps (3 s after an empty pull, 0.5 s while waiting for a reply) are
  replaced by a `PollSchedule`, by swapping the `time` module seen by
  `flwr.supernode.start_client_internal` (a node the SuperLink can wake sleeps until woken);
- the launcher claims tasks and starts each app in a forked child instead of a fresh
  `flwr-clientapp` / `flwr-serverapp` interpreter, installs the FAB once per machine and
  hash, and answers for a killed ClientApp at once (`flwr_tasks`, checked here too);
- the simulation engine's own hooks live in `fl_system.flower.flwr_engine`;
- bytes on the wire are counted on Flower's own content-addressed objects;
- a reply whose sender dies while uploading it is given up once the sender is offline, not
  after Flower's 180 s object-push session (which also blocked every other reply);
- a SuperNode may promise heartbeats more often than Flower's 30 s (and our SuperLink accepts
  down to MIN_HEARTBEAT s instead of 10), so a killed node is reported unavailable in seconds;
- DP noise is drawn from OS entropy and Flower's DP wrappers check the fl_system strategy they
  wrap (`fl_system.privacy.noise`, `fl_system.privacy.wrappers`, checked here too).

`fl_system.runtime.flwr_check.check()` verifies that the pinned flwr still has all of this;
the node, the launcher and the simulation call it at start-up, and a unit test calls it so an
flwr upgrade fails loudly.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import flwr.supercore.heartbeat as flwr_heartbeat
from flwr.app import Message
from flwr.app.message.arraychunk import ArrayChunk
from flwr.common.constant import (
    HEARTBEAT_CALL_TIMEOUT,
    HEARTBEAT_MAX_INTERVAL,
    ISOLATION_MODE_PROCESS,
)
from flwr.supercore.constant import HEAD_BODY_DIVIDER, HEAD_VALUE_DIVIDER
from flwr.supercore.inflatable.inflatable_object import (
    InflatableObject,
    get_all_nested_objects,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import (
    ObjectPullError,
    ObjectUnavailableError,
)
from flwr.supercore.inflatable.inflatable_utils import pull_objects as flwr_pull_objects
from flwr.supercore.runtime import RuntimeHttpClient

from fl_system.flower.wakeups import FALLBACK_POLL_SECONDS

if TYPE_CHECKING:
    from fl_system.runtime.supernode.polling import PollSchedule, Wakeups

ISOLATION = ISOLATION_MODE_PROCESS  # the SuperNode serves the Runtime API; we launch apps
IDLE_PULL_SLEEP = 3  # flwr's sleep after a pull that found no message
REPLY_SLEEP = 0.5  # flwr's sleep while waiting for the ClientApp's reply (and its objects)


def problems() -> list[str]:
    """What moved in the installed flwr of the node, heartbeat and reply-pull internals here."""
    return _node_loop_problems() + _heartbeat_problems() + _reply_pull_problems()


def _node_loop_problems() -> list[str]:
    problems = []
    flwr_supernode_loop = supernode_loop()
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
    pull = inspect.signature(flwr_supernode_loop._pull_and_store_message).parameters
    if next(iter(pull), None) != "state" or "state.set_node_id(" not in loop_source:
        problems.append("_pull_and_store_message no longer takes the node's state first")
    if "_unary_unary" not in vars(_node_client().ProtobufClient):
        problems.append("the SuperNode's Fleet client no longer calls through _unary_unary")
    return problems


# ----- the SuperNode process ------------------------------------------------------------------
class _NodeClock:
    """Stands in for the `time` module inside Flower's SuperNode loop: schedules its sleeps,
    and sleeps after an empty pull until woken when the node can be (`wakeups`)."""

    def __init__(self, schedule: PollSchedule, wakeups: Wakeups | None) -> None:
        self.schedule = schedule
        self.wakeups = wakeups
        self.last_message = time.monotonic()  # a node that just started expects work soon

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds == IDLE_PULL_SLEEP:
            seconds = self.schedule.wait(time.monotonic() - self.last_message)
            if self.wakeups is not None:
                self.wakeups.wait(max(seconds, FALLBACK_POLL_SECONDS))
                return
        elif seconds == REPLY_SLEEP:
            seconds = self.schedule.reply
        time.sleep(seconds)


def install_poll_schedule(
    schedule: PollSchedule, on_message: Callable[[], None], wakeups: Wakeups | None = None
) -> None:
    """Make this process's SuperNode loop poll by `schedule` (between wake-ups on `wakeups`,
    if given) and call `on_message` per message."""
    clock = _NodeClock(schedule, wakeups)
    flwr_supernode_loop = supernode_loop()
    pull = flwr_supernode_loop._pull_and_store_message

    def pull_and_store(*args: object, **kwargs: object) -> int | None:
        if wakeups is not None:
            state = kwargs["state"] if "state" in kwargs else args[0]
            wakeups.listen_as(state.get_node_id())  # type: ignore[attr-defined]
            wakeups.drain()
        run_id = pull(*args, **kwargs)
        if run_id is not None:
            clock.last_message = time.monotonic()
            on_message()
        return run_id

    flwr_supernode_loop.time = clock
    flwr_supernode_loop._pull_and_store_message = pull_and_store


REFUSED_LOG = "fl_system: the SuperLink refused this SuperNode's request:"


def say_when_refused() -> None:
    """Log REFUSED_LOG and the SuperLink's reason when it refuses an activated node's call.

    A SuperLink answers 401 once the node's key is unregistered or its signed timestamp is
    off (a clock far off); Flower 1.42 gives both the one reason "Invalid SuperNode
    authentication". Flower then ends the SuperNode as if it were stopped, saying nothing more
    than that it terminated gracefully; fl-client reads this line to tell its user why.
    """
    import httpx

    client_class = _node_client().FleetHttpClient
    call = client_class._unary_unary

    def calling(self: object, *args: object, **kwargs: object) -> object:
        try:
            return call(self, *args, **kwargs)
        except httpx.HTTPStatusError as err:
            if err.response.status_code == httpx.codes.UNAUTHORIZED:
                print(f"{REFUSED_LOG} {_reason(err.response)}", file=sys.stderr, flush=True)
            raise

    client_class._unary_unary = calling


def _reason(response: object) -> str:
    """The `detail` of an HTTP error's JSON body, else its text."""
    try:
        return str(response.json().get("detail", response.text))  # type: ignore[attr-defined]
    except ValueError:
        return str(response.text)  # type: ignore[attr-defined]


def run_supernode(flower_args: list[str]) -> None:
    """Flower's `flower-supernode` main in this process, with `flower_args` as its argv."""
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = ["flower-supernode", *flower_args]
    flower_supernode()


# ----- heartbeats ----------------------------------------------------------------------------
MIN_HEARTBEAT = 1.0  # seconds: the shortest heartbeat interval our SuperLink accepts


def supernode_loop() -> ModuleType:
    """The SuperNode's main loop, imported when used (~0.8 s: Flower's node stack)."""
    return importlib.import_module("flwr.supernode.start_client_internal")


def _node_connection() -> ModuleType:
    """The SuperNode's Fleet connection module, imported when used: it brings Flower's node
    stack (~0.3 s), which the ServerApp and fl-run, importing this module, never need."""
    return importlib.import_module("flwr.supernode.fleet_http_connection")


def _node_client() -> ModuleType:
    """The SuperNode's Fleet HTTP client module (its heartbeat call's timeout lives there)."""
    return importlib.import_module("flwr.supernode.fleet_http_client")


def _fleet_handler() -> ModuleType:
    """The SuperLink's Fleet API handlers, imported when used: they bring the SuperLink's
    state (SQLAlchemy, Alembic: ~0.5 s)."""
    return importlib.import_module("flwr.superlink.servicer.fleet.fleet_handlers")


def _heartbeat_readers() -> dict[ModuleType, tuple[str, ...]]:
    """Each module of the SuperNode that reads a heartbeat constant, and the ones it reads."""
    interval, timeout = "HEARTBEAT_DEFAULT_INTERVAL", "HEARTBEAT_CALL_TIMEOUT"
    return {
        _node_connection(): (interval,),
        _node_client(): (timeout,),
        flwr_heartbeat: (interval, timeout),
    }


def _http_grid() -> ModuleType:
    """The ServerApp's grid, imported when used: Flower's grid package brings the in-memory
    SuperLink state (~0.5 s), which fl-run's checks never need."""
    return importlib.import_module("flwr.superlink.grid.http_grid")


def _heartbeat_problems() -> list[str]:
    problems = []
    for module, names in _heartbeat_readers().items():
        for name in names:
            if not hasattr(module, name):
                problems.append(f"{module.__name__} no longer reads {name}")
    if "heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL" not in inspect.getsource(_node_connection()):
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
    values = {"HEARTBEAT_DEFAULT_INTERVAL": interval, "HEARTBEAT_CALL_TIMEOUT": call_timeout}
    for module, names in _heartbeat_readers().items():
        for name in names:
            setattr(module, name, values[name])


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
                    sizes[object_id] = deflated_size(obj)
                whole += sizes[object_id]
                content += 0 if obj is message else sizes[object_id]
            out.append(WireSize(whole, content))
    return out


def deflated_size(obj: InflatableObject) -> int:
    """`len(obj.deflate())`; for an array chunk (nearly all of a model's bytes) counted from
    Flower's header format instead of copying the chunk into a new one (0.1 ms a reply)."""
    if type(obj) is ArrayChunk:
        body = memoryview(obj.data)
        head = f"{ArrayChunk.__qualname__}{HEAD_VALUE_DIVIDER}{HEAD_VALUE_DIVIDER}{len(body)}"
        return len(head.encode()) + len(HEAD_BODY_DIVIDER) + body.nbytes
    return len(obj.deflate())
