"""Flower's own SuperNode loop steps on a real node state: a message ignored because its run
stopped mid-receive leaves no task and no message, and a reply the loop did not push is
pushed at the next pull."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.common.constant import Status
from flwr.supercore.inflatable.inflatable_object import get_object_tree
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run, RunNotRunningException
from flwr.supernode import start_client_internal as loop
from flwr.supernode.nodestate import NodeStateFactory

from fl_system.flower import FlwrInternalsChanged, stranded_replies
from fl_system.runtime import flwr_check

RUN = 61


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch):
    """The hooks installed (undone afterwards) and a node state that knows run RUN."""
    monkeypatch.setattr(loop, "_pull_and_store_message", loop._pull_and_store_message)
    monkeypatch.setattr(loop, "_push_messages", loop._push_messages)
    stranded_replies.install()
    state = NodeStateFactory(ObjectStoreFactory()).state()
    store = state.object_store
    state.set_node_id(7)
    state.store_run(Run.create_empty(RUN))
    return state, store


def _message() -> Message:
    message = Message(
        RecordDict({"arrays": ArrayRecord([np.ones(3, np.float32)])}),
        dst_node_id=7,
        message_type="train",
    )
    message.metadata.__dict__["_run_id"] = RUN
    message.metadata.__dict__["_message_id"] = message.object_id
    return message


def _pull(state, store, receive, pull_object) -> int | None:
    return loop._pull_and_store_message(
        state=state, object_store=store, node_config={}, receive=receive,
        get_run=None, get_fab=None, pull_object=pull_object,
        confirm_message_received=lambda run_id, message_id: None, trusted_entities=None,
    )  # fmt: skip


def _stopped(run_id: int, object_id: str) -> bytes:
    raise RunNotRunningException(f"run {run_id} stopped")


def test_a_message_ignored_mid_receive_leaves_no_task_and_no_message(node) -> None:
    state, store = node
    message = _message()
    tree = get_object_tree(message)
    assert _pull(state, store, lambda: (message, tree), _stopped) is None
    tasks = state.get_tasks(run_ids=[RUN])
    assert [(t.status.status, t.status.details) for t in tasks] == [
        (Status.FINISHED, stranded_replies.IGNORED)
    ]
    assert state.get_messages_legacy(run_ids=[RUN]) == []


def test_a_reply_left_behind_is_pushed_at_the_next_pull(node) -> None:
    state, store = node
    sent: list[str] = []

    def send(message: Message, tree: object, runtime: float) -> tuple[set[str], str]:
        sent.append(message.metadata.message_id)
        return set(), "session"

    first, second = _message(), _message()
    for replied in (first, second):
        loop._insert_message(Message(RecordDict(), reply_to=replied), state, store)
        if replied is first:  # the loop pushes what is there, as after a message it pulled
            loop._push_messages(state=state, object_store=store, send=send, push_object=None)
    assert len(sent) == 1
    assert _pull(state, store, lambda: None, _stopped) is None  # no message: still pushed
    assert len(sent) == 2


def test_a_node_state_that_keeps_its_messages_elsewhere_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

    def init(self: object, object_store: object) -> None:
        """Keeps its messages in a database: what a changed flwr might do."""

    monkeypatch.setattr(InMemoryNodeState, "__init__", init)
    with pytest.raises(FlwrInternalsChanged, match="no longer keeps msg_store"):
        flwr_check.check()
