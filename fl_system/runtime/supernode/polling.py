"""How long a SuperNode waits before asking the SuperLink for work again.

Flower's SuperNode sleeps a fixed 3 s after every empty pull, which is most of a round on a
small model. A federation's messages come in bursts (a round's train message, then the next
round's a moment later), so poll quickly while a run is active and back off to the idle
interval once nothing has arrived for a while.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

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
