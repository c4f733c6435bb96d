"""The ServerApp launcher woken when a run is created, instead of asking five times a second.

Flower's SuperExec, and the launcher that stands in for it, learns of a new run only by
polling the SuperLink's `AcquireTask`: each poll is an HTTP call the SuperLink authenticates
(a nonce written to its state) and answers with SQL. Polling often enough for a run to start
promptly (0.2 s) was most of an idle SuperLink's CPU. A run's ServerApp task is created in one
place, `create_run` of the SuperLink's state (the Control API's StartRun), so once it has
returned, committed, this process sends a datagram to the launcher's socket; the launcher
polls only every second besides (a datagram sent before it listened, or dropped, costs a
second at most).
"""

from __future__ import annotations

import contextlib
import importlib
import socket
from collections.abc import Callable
from typing import Any

STATES = (
    ("flwr.server.superlink.linkstate.sql_linkstate", "SqlLinkState"),
    ("flwr.server.superlink.linkstate.in_memory_linkstate", "InMemoryLinkState"),
)
RUN_CREATED = b"run"  # the datagram: ServerApp tasks are pending (pids say "<pid> <address>")
INSTALLED = "wakes_the_launcher"


def problems() -> list[str]:
    """What moved in the installed flwr of the states' `create_run`."""
    found = []
    for module, name in STATES:
        cls = getattr(importlib.import_module(module), name, None)
        if not callable(getattr(cls, "create_run", None)):
            found.append(f"{module} has no {name}.create_run")
    return found


def wake_on_new_runs(socket_path: str) -> None:
    """Make this process's SuperLink states wake the launcher at `socket_path` per new run."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)  # a full queue drops the datagram: the launcher polls anyway
    for module, name in STATES:
        cls = getattr(importlib.import_module(module), name)
        if not getattr(cls.create_run, INSTALLED, False):
            cls.create_run = _waking(cls.create_run, sock, socket_path)


def _waking(create: Callable[..., int], sock: socket.socket, path: str) -> Callable[..., int]:
    def create_run(state: Any, *args: Any, **kwargs: Any) -> int:
        run_id = create(state, *args, **kwargs)
        with contextlib.suppress(OSError):  # no launcher listening (yet): it polls
            sock.sendto(RUN_CREATED, path)
        return run_id

    setattr(create_run, INSTALLED, True)
    return create_run
