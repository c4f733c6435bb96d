"""A SuperNode refuses a run its site does not accept before any of the run's code is there:
the refusal is the node's reply to the run's message, and a line in the node's log.

Flower's SuperNode fetches a new run's details and FAB when the run's first message arrives,
then creates the ClientApp's task. Its own FAB check (`trusted_entities`) only knows Flower's
platform signatures, so `install` wraps the loop's `_pull_and_store_message`: a message of a
run this node has not taken yet is checked first (`check(run, fab)`, with the run and FAB
Flower's own `get_run` and `get_fab` fetch); a refused one is answered with Flower's error
reply for an unverifiable FAB (`ErrorCode.INVALID_FAB`), carrying the reason, exactly as
Flower answers one its own check refuses, and never reaches the state: no task, no FAB
installed, nothing imported. Each run is decided once per node process.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from flwr.app import Error, Message
from flwr.supercore.run import RunNotRunningException

from fl_system.flower.flwr_hooks import supernode_loop

INSTALLED = "with_app_checks"


def problems() -> list[str]:
    """What moved in the installed flwr of the SuperNode's FAB verification."""
    loop = supernode_loop()
    found = []
    for name in ("_pull_and_store_message", "_insert_message", "FAB_VERIFICATION_ERROR"):
        if not hasattr(loop, name):
            found.append(f"the SuperNode's loop has no {name}")
    if found:
        return found
    params = inspect.signature(loop._pull_and_store_message).parameters
    for name in ("state", "object_store", "receive", "get_run", "get_fab"):
        if name not in params:
            found.append(f"_pull_and_store_message no longer takes {name}")
    source = inspect.getsource(loop._pull_and_store_message)
    if "reply = Message(FAB_VERIFICATION_ERROR, reply_to=message)" not in source:
        found.append("the SuperNode no longer answers an unverified FAB with an error reply")
    return found


def install(check: Callable[[Any, Any], str | None]) -> None:
    """Make this process's SuperNode ask `check(run, fab)` before it takes a run: None
    takes it, a reason refuses it."""
    loop = supernode_loop()
    pull: Callable[..., int | None] = loop._pull_and_store_message
    if getattr(pull, INSTALLED, False):
        return
    decided: dict[int, str | None] = {}  # run id -> its refusal, None when taken

    def pull_and_store(**kwargs: Any) -> int | None:
        if (got := kwargs["receive"]()) is None:
            return None
        message = got[0]
        run_id = message.metadata.run_id
        if run_id not in decided and kwargs["state"].get_run(run_id) is None:
            try:
                run = kwargs["get_run"](run_id)
                decided[run_id] = check(run, kwargs["get_fab"](run.fab_hash, run_id))
            except RunNotRunningException:  # as Flower's own loop does: the message is dropped
                return None
        if (reason := decided.get(run_id)) is None:
            return pull(**{**kwargs, "receive": lambda: got})
        reply = Message(Error(loop.FAB_VERIFICATION_ERROR.code, reason), reply_to=message)
        loop._insert_message(reply, kwargs["state"], kwargs["object_store"])
        return run_id  # the loop pushes the refusal as this node's reply

    setattr(pull_and_store, INSTALLED, True)
    loop._pull_and_store_message = pull_and_store
