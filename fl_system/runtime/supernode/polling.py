"""How long a SuperNode waits before asking the SuperLink for work again.

Flower's SuperNode sleeps a fixed 3 s after every empty pull, which is most of a round on a
small model. A federation's messages come in bursts (a round's train message, then the next
round's a moment later), so poll quickly while a run is active and back off to the idle
interval once nothing has arrived for a while. A node whose SuperLink runs on the same
machine (fl-run's local federation) is woken when a message for it is stored (`Wakeups`) and
polls only every `wakeups.FALLBACK_POLL_SECONDS` besides.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from fl_system.flower.wakeups import node_socket

ACTIVE_ENV = "FL_NODE_POLL_ACTIVE"
IDLE_ENV = "FL_NODE_POLL_IDLE"
WINDOW_ENV = "FL_NODE_ACTIVE_WINDOW"
REPLY_ENV = "FL_NODE_REPLY_POLL"


@dataclass(frozen=True)
class PollSchedule:
    """Seconds between pulls as a function of the time since the last message.

    Within `active_window` seconds of the last message the node pulls every `active`
    seconds; after that the wait doubles per pull until it reaches `idle`. `reply` is how
    often the node checks whether its ClientApp has answered.
    """

    active: float = 0.1
    idle: float = 3.0
    active_window: float = 30.0
    reply: float = 0.02

    def __post_init__(self) -> None:
        for name in ("active", "idle", "reply"):
            value = getattr(self, name)
            if not 0 < value <= 60:
                raise ValueError(f"poll interval '{name}' must be in (0, 60] s, got {value}")
        if self.active > self.idle:
            raise ValueError(f"active poll {self.active} s is longer than idle poll {self.idle} s")
        if not self.active_window >= 0:  # also rejects NaN
            raise ValueError(f"'active_window' must be >= 0 s, got {self.active_window}")

    def wait(self, since_last_message: float) -> float:
        """Seconds to sleep after an empty pull, `since_last_message` seconds after one."""
        past = since_last_message - self.active_window
        if past <= 0:
            return self.active
        wait = self.active
        while wait < self.idle and past > 0:
            past -= wait
            wait *= 2
        return min(wait, self.idle)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> PollSchedule:
        """Defaults, overridden by FL_NODE_POLL_ACTIVE / _IDLE / _ACTIVE_WINDOW / _REPLY_POLL."""
        env = os.environ if env is None else env
        names = {"active": ACTIVE_ENV, "idle": IDLE_ENV, "active_window": WINDOW_ENV}
        names["reply"] = REPLY_ENV
        values = {field: env_seconds(var, env) for field, var in names.items()}
        return cls(**{field: value for field, value in values.items() if value is not None})


def env_seconds(var: str, env: Mapping[str, str] | None = None) -> float | None:
    """The number of seconds environment variable `var` holds; None when unset or empty."""
    text = (os.environ if env is None else env).get(var)
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{var} must be a number of seconds, got {text!r}") from None


class Wakeups:
    """The socket this node is woken on by a SuperLink on the same machine (`wakeups`): at
    `node_socket(directory, node id)`, bound once Flower has the node's id."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.node_id: int | None = None
        self.sock: socket.socket | None = None

    def listen_as(self, node_id: int) -> None:
        """Listen at this node id's socket (again, after the node re-registered)."""
        if node_id == self.node_id:
            return
        self.close()
        path = node_socket(self.directory, node_id)
        with contextlib.suppress(FileNotFoundError):  # this node's previous process left it
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.setblocking(False)
        self.sock, self.node_id = sock, node_id

    def drain(self) -> None:
        """Forget the wake-ups so far: the pull about to be made sees their messages."""
        while self.sock is not None:
            try:
                self.sock.recv(64)
            except BlockingIOError:
                return

    def wait(self, seconds: float) -> None:
        """Sleep until woken, at most `seconds` (the poll that follows covers a lost one)."""
        if self.sock is None:
            time.sleep(seconds)
        else:
            select.select([self.sock], [], [], seconds)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                os.unlink(node_socket(self.directory, self.node_id))
            self.sock.close()
        self.sock, self.node_id = None, None
