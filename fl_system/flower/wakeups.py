"""The SuperLink wakes whoever on this machine has work: the ServerApp launcher when a run is
created, a SuperNode when a message for it is stored. Both would otherwise learn of it only by
polling over HTTP.

Flower's SuperExec, and the launcher that stands in for it, learns of a new run only by
polling the SuperLink's `AcquireTask`: each poll is an HTTP call the SuperLink authenticates
(a nonce written to its state) and answers with SQL. Polling often enough for a run to start
promptly (0.2 s) was most of an idle SuperLink's CPU. A run's ServerApp task is created in one
place, `create_run` of the SuperLink's state (the Control API's StartRun), so once it has
returned, committed, this process sends a datagram to the launcher's socket.

A SuperNode learns of its next message by pulling every 0.1 s while a run is active: at 10
nodes a quarter of the SuperLink's requests were empty pulls, and its HTTP stack made rounds
slower on Flower 1.42 than on 1.36. A message for a node is stored in one place,
`store_message_and_object_tree` (the Runtime API's PushMessages), so once it has returned the
node whose id names a socket in the wake-up folder (FL_NODE_WAKE_DIR: fl-run's local
federation, every node on this machine) gets a datagram and pulls at once.

Whoever is woken still polls every FALLBACK_POLL_SECONDS: a datagram sent before it listened,
or dropped, costs that much at most.
"""

from __future__ import annotations

import contextlib
import importlib
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATES = (
    ("flwr.server.superlink.linkstate.sql_linkstate", "SqlLinkState"),
    ("flwr.server.superlink.linkstate.in_memory_linkstate", "InMemoryLinkState"),
)
WRAPPED = ("create_run", "store_message_and_object_tree")
RUN_CREATED = b"run"  # to the launcher: ServerApp tasks are pending (pids say "<pid> <address>")
MESSAGE_STORED = b"message"  # to a node: a message for it is stored
NODE_WAKE_DIR_ENV = "FL_NODE_WAKE_DIR"  # a node with id N listens at <dir>/N
FALLBACK_POLL_SECONDS = 1.0  # how often one who can be woken polls all the same
INSTALLED = "wakes_who_has_work"


def problems() -> list[str]:
    """What moved in the installed flwr of the states' `create_run` and
    `store_message_and_object_tree`."""
    found = []
    for module, name in STATES:
        cls = getattr(importlib.import_module(module), name, None)
        for method in WRAPPED:
            if not callable(getattr(cls, method, None)):
                found.append(f"{module} has no {name}.{method}")
    return found


def node_socket(directory: str | Path, node_id: int) -> str:
    """Where the node `node_id` listens for its wake-ups."""
    return str(Path(directory) / str(node_id))


def wake_on_new_runs(socket_path: str) -> None:
    """Make this process's SuperLink states wake the launcher at `socket_path` per new run."""
    sock = _sender()

    def wake(run_id: int, *args: Any, **kwargs: Any) -> None:
        sock.sendto(RUN_CREATED, socket_path)

    _install("create_run", wake)


def wake_nodes_on_messages(directory: str) -> None:
    """Make this process's SuperLink states wake the node at `node_socket(directory, id)` once
    a message for it is stored."""
    sock = _sender()

    def wake(result: tuple[bool, list[str]], *args: Any, **kwargs: Any) -> None:
        meta = (args[0] if args else kwargs["message"]).metadata
        if result[0] and not meta.reply_to_message_id:
            sock.sendto(MESSAGE_STORED, node_socket(directory, meta.dst_node_id))

    _install("store_message_and_object_tree", wake)


def _sender() -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)  # a full queue drops the datagram: the receiver polls anyway
    return sock


def _install(method: str, wake: Callable[..., None]) -> None:
    for module, name in STATES:
        cls = getattr(importlib.import_module(module), name)
        if not getattr(getattr(cls, method), INSTALLED, False):
            setattr(cls, method, _waking(getattr(cls, method), wake))


def _waking(call: Callable[..., Any], wake: Callable[..., None]) -> Callable[..., Any]:
    def waking(state: Any, *args: Any, **kwargs: Any) -> Any:
        result = call(state, *args, **kwargs)  # returned: committed
        with contextlib.suppress(OSError):  # nobody listening (yet): they poll
            wake(result, *args, **kwargs)
        return result

    setattr(waking, INSTALLED, True)
    return waking
