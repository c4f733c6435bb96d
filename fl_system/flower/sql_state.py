"""The SQL SuperLink state at a fraction of its cost per call.

`fl-server` keeps the SuperLink's state in an SQLite file, and Flower's SQL state pays for it
on every call. Profiled on a test module of twelve two-round runs on one federation, the
SuperLink took 46 CPU-s where the runs trained for 24; two of its habits need no SQL most of
the time:

- **Empty pulls.** Every pull of a SuperNode (ten a second while a run is active,
  `polling.PollSchedule`) claims the node's undelivered messages with an UPDATE ... RETURNING,
  found or not. Messages for nodes are only ever written by this process (`store_message_ins`,
  which `store_message_and_object_tree` calls), so a generation counter, raised after each
  such write has committed, tells whether anything could have arrived since a node's pull
  found nothing: if not, the pull is answered "nothing" from memory. A pull that read the
  counter before a write committed may miss that write's message, but the raise that follows
  the commit makes the node's next pull ask SQL again.
- **Expired task tokens.** Before nearly every call (each object pushed or pulled checks its
  run's status) Flower sweeps the tasks whose heartbeat expired, two UPDATEs: 17 % of the
  SuperLink's CPU. A task expires after missing heartbeats for seconds, so the sweep runs at
  most every SWEEP_SECONDS here: a task is found expired at most that much later.
"""

from __future__ import annotations

import importlib
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SQL_LINK = "flwr.server.superlink.linkstate.sql_linkstate"
SQL_CORE = "flwr.supercore.corestate.sql_corestate"
SWEEP_SECONDS = 0.5
INSTALLED = "cheaper_sql_calls"  # marks our wrappers on Flower's SQL state classes
MESSAGE_WRITES = ("store_message_ins", "store_message_and_object_tree")
PULL_PARAMETERS = ["node_id", "limit", "run_id"]  # get_message_ins after self, as wrapped here


def problems() -> list[str]:
    """What moved in the installed flwr of the SQL state's methods used here."""
    link = importlib.import_module(SQL_LINK).SqlLinkState
    core = importlib.import_module(SQL_CORE).SqlCoreState
    found = [
        f"{cls.__name__} has no {name}"
        for cls, names in (
            (link, ("get_message_ins", *MESSAGE_WRITES)),
            (core, ("_cleanup_expired_task_tokens",)),
        )
        for name in names
        if not callable(getattr(cls, name, None))
    ]
    pull = list(inspect.signature(link.get_message_ins).parameters)[1:] if not found else []
    if pull and pull != PULL_PARAMETERS:
        found.append(f"SqlLinkState.get_message_ins no longer takes {PULL_PARAMETERS}")
    return found


@dataclass
class _Memo:
    """What a state remembers between calls."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = 0  # raised after every committed write of a message
    # (node, run asked for) -> the generation at which its pull found nothing
    empty_at: dict[tuple[int, int | None], int] = field(default_factory=dict)
    swept: float = float("-inf")  # when expired task tokens were last swept (monotonic)


def _memo(state: Any) -> _Memo:
    memo = state.__dict__.get("_fl_sql_memo")
    if memo is None:
        memo = state.__dict__.setdefault("_fl_sql_memo", _Memo())
    return memo


def cheaper_calls() -> None:
    """Make this process's SQL SuperLink state answer empty pulls from memory and sweep
    expired task tokens at most every SWEEP_SECONDS."""
    link = importlib.import_module(SQL_LINK).SqlLinkState
    core = importlib.import_module(SQL_CORE).SqlCoreState
    if getattr(link.get_message_ins, INSTALLED, False):
        return
    link.get_message_ins = _remembering(link.get_message_ins)
    for name in MESSAGE_WRITES:
        setattr(link, name, _raising(getattr(link, name)))
    core._cleanup_expired_task_tokens = _seldom(core._cleanup_expired_task_tokens)


def _remembering(get: Callable[..., list]) -> Callable[..., list]:
    def get_message_ins(
        state: Any, node_id: int, limit: int | None, *, run_id: int | None = None
    ) -> list:
        memo = _memo(state)
        key = (node_id, run_id)
        with memo.lock:
            generation = memo.generation
            if memo.empty_at.get(key) == generation:
                return []
        found = get(state, node_id, limit, run_id=run_id)
        if not found:
            with memo.lock:
                memo.empty_at[key] = generation
        return found

    setattr(get_message_ins, INSTALLED, True)
    return get_message_ins


def _raising(store: Callable[..., Any]) -> Callable[..., Any]:
    def stored(state: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return store(state, *args, **kwargs)
        finally:  # committed (or failed): a node's next pull asks SQL again
            memo = _memo(state)
            with memo.lock:
                memo.generation += 1

    return stored


def _seldom(sweep: Callable[[Any], None]) -> Callable[[Any], None]:
    def cleanup_expired_task_tokens(state: Any) -> None:
        memo = _memo(state)
        with memo.lock:
            if time.monotonic() - memo.swept < SWEEP_SECONDS:
                return
            memo.swept = time.monotonic()
        sweep(state)

    return cleanup_expired_task_tokens
