"""A SuperNode's replies that Flower's loop would strand, and the tasks it leaves behind.

Flower's SuperNode loop pulls one message, waits for *a* reply, pushes the replies there are
and pulls again: it counts on one reply per message pulled. When a run is stopped while the
node receives one of its messages, Flower ignores the message but keeps its task and the
message; a ClientApp launched for that task answers it later, and the loop takes that extra
reply for the answer to the next message it pulls (another run's). The real answer then waits
in the node's state until a further message arrives, which never happens while the server
waits for that answer. Seen: a run started right after `flwr stop` of another on the same nodes
waited for ever for one node's handshake reply.

So (`install`, in the SuperNode's process): a message Flower ignored has its task finished and
is dropped at once, so no ClientApp answers it; and each pull first pushes the replies already
waiting, so that none is stranded behind the loop's one-for-one rhythm whatever its cause.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from flwr.common.constant import SubStatus

from fl_system.flower.flwr_hooks import supernode_loop

IGNORED = "the run stopped while this node received the message"


def problems() -> list[str]:
    """What of the installed flwr these hooks rely on has moved."""
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState, MessageEntry

    loop = supernode_loop()
    found = []
    source = inspect.getsource(loop.start_client_internal)
    for step in ("_pull_and_store_message(", "_push_messages("):
        if f"{step}\n                state=state," not in source:
            found.append(f"start_client_internal no longer calls {step}state=...) by keyword")
    init = inspect.getsource(InMemoryNodeState.__init__)
    if "self.msg_store" not in init or "self.lock_msg_store" not in init:
        found.append("InMemoryNodeState no longer keeps msg_store and lock_msg_store")
    if "is_retrieved" not in MessageEntry.__dataclass_fields__:
        found.append("the node state's MessageEntry has no is_retrieved")
    return found


def install() -> None:
    """Wrap Flower's SuperNode loop steps (`_pull_and_store_message`, `_push_messages`)."""
    loop = supernode_loop()
    pull: Callable[..., int | None] = loop._pull_and_store_message
    push: Callable[..., None] = loop._push_messages
    pushing: dict[str, Any] = {}  # the loop's own arguments to `_push_messages`

    def push_messages(**kwargs: Any) -> None:
        pushing.update(kwargs)
        push(**kwargs)

    def pull_and_store(**kwargs: Any) -> int | None:
        state = kwargs["state"]
        if pushing and replies_waiting(state):
            push(**pushing)  # returns at once: the replies are there
        with _recording(state) as (tasks, messages):
            run_id = pull(**kwargs)
        if run_id is None:  # nothing pulled, or a message pulled and ignored
            forget(state, kwargs["object_store"], tasks, messages)
        return run_id

    loop._push_messages = push_messages
    loop._pull_and_store_message = pull_and_store


def replies_waiting(state: Any) -> bool:
    """Whether the node holds a reply not yet taken for pushing (read without taking it:
    Flower's `get_messages` marks what it returns as taken)."""
    with state.lock_msg_store:
        return any(
            not entry.is_retrieved and entry.message.metadata.reply_to_message_id
            for entry in state.msg_store.values()
        )


def forget(state: Any, object_store: Any, tasks: list[int], messages: list[str]) -> None:
    """Finish `tasks` and drop `messages` with their objects (a no-op for those Flower has
    dropped itself, as it does when the objects could not be pulled)."""
    for task_id in tasks:
        state.finish_task(task_id, sub_status=SubStatus.FAILED, details=IGNORED)
    if messages:
        state.delete_messages(message_ids=messages)
        for message_id in messages:
            object_store.delete(message_id)


@contextlib.contextmanager
def _recording(state: Any) -> Iterator[tuple[list[int], list[str]]]:
    """The task ids `state.create_task` and the message ids `state.store_message` gave out
    while the block ran."""
    tasks: list[int] = []
    messages: list[str] = []
    create_task, store_message = state.create_task, state.store_message

    def creating(*args: Any, **kwargs: Any) -> int | None:
        task_id = create_task(*args, **kwargs)
        if task_id is not None:
            tasks.append(task_id)
        return task_id

    def storing(message: Any) -> str | None:
        message_id = store_message(message)
        if message_id is not None:
            messages.append(message_id)
        return message_id

    state.create_task, state.store_message = creating, storing
    try:
        yield tasks, messages
    finally:
        del state.create_task, state.store_message
