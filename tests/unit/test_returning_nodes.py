"""A node activated again after being offline ends the work its previous process left: its
unfinished uploads are expired, and the messages it pulled and never answered are answered as
Flower answers those of an offline node; in the SuperLink's state in memory and in SQL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.server.superlink.linkstate import LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID

from fl_system.flower import returning_nodes


@pytest.fixture
def unhooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's state classes as they were, once the test is over."""
    for cls in (InMemoryLinkState, SqlLinkState):
        for name in ("activate_node", "get_message_res"):
            monkeypatch.setattr(cls, name, getattr(cls, name))


@pytest.fixture(params=["memory", "sql"])
def link(request: pytest.FixtureRequest, tmp_path: Path, unhooked: None) -> Link:
    returning_nodes.end_work_of_returning_nodes()
    db = FLWR_IN_MEMORY_DB_NAME if request.param == "memory" else str(tmp_path / "link.db")
    return Link(state_on(db))


def state_on(db: str):
    """Flower's SuperLink state: in memory, or in the SQLite file `db`."""
    return LinkStateFactory(db, NoOpFederationManager(), ObjectStoreFactory(db)).state()


def _stamped(message: Message, **metadata: object) -> Message:
    for key, value in metadata.items():
        message.metadata.__dict__[f"_{key}"] = value
    message.metadata.__dict__["_message_id"] = message.object_id
    return message


def _model(value: float) -> RecordDict:
    return RecordDict({"model": ArrayRecord({"w": Array(np.full(3, value))})})


class Link:
    """A run on a SuperLink `state` whose nodes pull train messages and reply to them."""

    def __init__(self, state) -> None:
        self.state = state
        self.run_id = state.create_run(
            None, None, None, {}, NOOP_FEDERATION_ID, None, None, "serverapp"
        )
        self.nodes = 0

    def node(self) -> int:
        self.nodes += 1
        name = f"node-{self.nodes}"
        node_id = self.state.create_node("aid", name, name.encode(), 2.0)
        assert self.state.activate_node(node_id, 2.0)
        return node_id

    def send(self, node_id: int, *, pulled: bool = True) -> Message:
        """A train message for `node_id`, pulled by the node (or waiting for it)."""
        ins = Message(_model(0.0), dst_node_id=node_id, message_type="train")
        self._store(_stamped(ins, run_id=self.run_id, src_node_id=SUPERLINK_NODE_ID))
        if pulled:
            assert [m.metadata.message_id for m in self.state.get_message_ins(node_id, None)] == [
                ins.metadata.message_id
            ]
        return ins

    def reply(self, ins: Message, value: float, *, uploaded: bool) -> str:
        """The node's reply to `ins`, its objects uploaded or still to come; its id."""
        reply = _stamped(Message(_model(value), reply_to=ins))
        self._store(reply, uploaded=uploaded)
        return reply.metadata.message_id

    def _store(self, message: Message, *, uploaded: bool = True) -> None:
        session = self.state.start_session(self.run_id)
        stored, missing = self.state.store_message_and_object_tree(
            message, get_object_tree(message), session
        )
        assert stored and missing
        if uploaded:
            objects = get_all_nested_objects(message)
            for object_id in missing:
                self.state.store_object(
                    self.run_id, session, object_id, objects[object_id].deflate()
                )

    def restart(self, node_id: int) -> None:
        """The node's process dies, its heartbeat window ends, and a new process activates it."""
        assert self.state.deactivate_node(node_id)
        assert self.state.activate_node(node_id, 2.0)

    def replies(self, messages: list[Message]) -> dict[str, int]:
        """What the SuperLink hands out for `messages`: message id -> 0 for a reply, else the
        error code (each once: a reply is then delivered)."""
        got = self.state.get_message_res({m.metadata.message_id for m in messages}, self.run_id)
        return {r.metadata.reply_to_message_id: r.error.code if r.has_error() else 0 for r in got}


def test_a_returning_node_answers_what_it_left_and_nothing_else(link: Link) -> None:
    returning, other = link.node(), link.node()
    uploading = link.send(returning)  # killed mid-upload
    link.reply(uploading, 1.0, uploaded=False)
    training = link.send(returning)  # killed while training
    answered = link.send(returning)  # an earlier reply, complete
    link.reply(answered, 2.0, uploaded=True)
    queued = link.send(returning, pulled=False)  # the new process will pull it
    others = link.send(other)  # another node, still uploading
    link.reply(others, 3.0, uploaded=False)

    link.restart(returning)

    lost = ErrorCode.NODE_UNAVAILABLE
    assert link.replies([uploading, training, answered, queued, others]) == {
        uploading.metadata.message_id: lost,
        training.metadata.message_id: lost,
        answered.metadata.message_id: 0,
        others.metadata.message_id: 0,
    }
    assert link.replies([uploading, training]) == {}  # answered once, as Flower does
    pulled = link.state.get_message_ins(returning, None)
    assert [m.metadata.message_id for m in pulled] == [queued.metadata.message_id]


def test_an_upload_the_server_is_pulling_is_gone_when_its_node_returns(link: Link) -> None:
    node = link.node()
    ins = link.send(node)
    reply_id = link.reply(ins, 1.0, uploaded=False)
    assert link.replies([ins]) == {ins.metadata.message_id: 0}  # the ServerApp has its id
    assert link.state.get_object(link.run_id, reply_id) == b""  # objects still to come
    link.restart(node)
    assert link.state.get_object(link.run_id, reply_id) is None  # the pull fails at once


def test_a_node_that_stayed_online_keeps_its_work(link: Link) -> None:
    node = link.node()
    ins = link.send(node)
    link.reply(ins, 1.0, uploaded=False)
    assert not link.state.activate_node(node, 2.0)  # Flower activates offline nodes only
    assert link.replies([ins]) == {ins.metadata.message_id: 0}


def test_installing_twice_wraps_once(unhooked: None) -> None:
    returning_nodes.end_work_of_returning_nodes()
    once = InMemoryLinkState.activate_node, SqlLinkState.get_message_res
    returning_nodes.end_work_of_returning_nodes()
    assert (InMemoryLinkState.activate_node, SqlLinkState.get_message_res) == once
    assert returning_nodes.problems() == []
