"""A node that comes back loses, at once and visibly, the work its previous process left.

A SuperNode pulls a train message, trains, registers its reply, then uploads the reply's
objects. Killed anywhere in between and started again at once under the same key (so with the
same node id), it is offline only for the moment between its old heartbeat window's end and
its new activation. Flower answers "node unavailable" for messages of an offline node only
while it is offline, so the ServerApp, which looks now and then, usually missed that moment and
waited: for objects nobody would send until Flower's object-push session expired (180 s), or
for a reply nobody would write until the round's deadline.

Our SuperLink, when it activates a node that was offline, ends what the node's previous
process left unfinished: the uploads still pending of its replies are expired by Flower's own
expiry path (a ServerApp pulling those objects is told they are gone), and every message the
node had pulled without a complete reply is answered as Flower answers one for an offline node
(`NODE_UNAVAILABLE`, so the ServerApp handshakes the node again before it trains next).
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from flwr.app import Message

IN_MEMORY = "flwr.server.superlink.linkstate.in_memory_linkstate"
SQL = "flwr.server.superlink.linkstate.sql_linkstate"
UTILS = "flwr.server.superlink.linkstate.utils"
SQL_MODELS = (
    "flwr.supercore.state.schema.linkstate_models",
    "flwr.supercore.state.schema.corestate_models",
)
UINT64_COLUMNS = ["run_id", "src_node_id", "dst_node_id"]  # stored signed in SQL
INSTALLED = "ends_returning_nodes_work"  # marks our wrappers on Flower's state classes
_lost_lock = threading.Lock()


def _module(name: str) -> ModuleType:
    """Flower's SuperLink state modules, imported when used (SQLAlchemy comes with them)."""
    return importlib.import_module(name)


def problems() -> list[str]:
    """What moved in the installed flwr of the SuperLink state used here."""
    found = []
    for cls in (_module(IN_MEMORY).InMemoryLinkState, _module(SQL).SqlLinkState):
        for name in ("activate_node", "get_message_res", "_cleanup_push_session"):
            if not callable(getattr(cls, name, None)):
                found.append(f"{cls.__name__} has no {name}")
        if "run_id" not in inspect.signature(cls.get_message_res).parameters:
            found.append(f"{cls.__name__}.get_message_res no longer takes run_id")
    for module, name in (
        (UTILS, "create_message_error_unavailable_res_message"),
        (SQL, "_message_model_to_dict"),
        (SQL, "dict_to_message"),
        (SQL, "convert_sint64_values_in_dict_to_uint64"),
    ):
        if not callable(getattr(_module(module), name, None)):
            found.append(f"{module} has no {name}")
    links, core = (_module(name) for name in SQL_MODELS)
    for model, columns in (
        (getattr(links, "MessageIns", None), ("message_id", "dst_node_id", "delivered_at")),
        (getattr(links, "MessageRes", None), ("message_id", "src_node_id", "reply_to_message_id")),
        (getattr(core, "ObjectPushSessionRoot", None), ("session_id", "root_object_id")),
        (getattr(core, "ObjectPushSession", None), ("session_id", "pending_count")),
    ):
        if model is None or not all(hasattr(model, c) for c in columns):
            found.append(f"the SuperLink's tables no longer hold {', '.join(columns)}")
    return found


def end_work_of_returning_nodes() -> None:
    """Make this process's SuperLink state (in memory or SQL), whenever it activates a node
    that was offline, end that node's unfinished uploads and answer its unanswered messages."""
    for cls, pending, unanswered in (
        (_module(IN_MEMORY).InMemoryLinkState, _pending_in_memory, _unanswered_in_memory),
        (_module(SQL).SqlLinkState, _pending_in_sql, _unanswered_in_sql),
    ):
        if not getattr(cls.activate_node, INSTALLED, False):
            cls.activate_node = _activating(cls.activate_node, pending, unanswered)
            cls.get_message_res = _answering(cls.get_message_res)


def _lost(state: Any) -> dict[str, Message]:
    """The messages `state` answers as lost: message id -> the message (kept on the state)."""
    return state.__dict__.setdefault("_fl_lost_messages", {})


def _activating(
    activate: Callable[..., bool],
    pending: Callable[[Any, int], list[str]],
    unanswered: Callable[[Any, int], list[Message]],
) -> Callable[..., bool]:
    def activate_node(state: Any, node_id: int, heartbeat_interval: float) -> bool:
        activated = activate(state, node_id, heartbeat_interval)
        if activated:  # it was offline (or new): what its previous process held is lost
            for session_id in pending(state, node_id):
                state._cleanup_push_session(session_id, cleanup_messages=True)
            with _lost_lock:
                _lost(state).update((m.metadata.message_id, m) for m in unanswered(state, node_id))
        return activated

    setattr(activate_node, INSTALLED, True)
    return activate_node


def _answering(get_replies: Callable[..., list[Message]]) -> Callable[..., list[Message]]:
    def get_message_res(state: Any, message_ids: set[str], run_id: int) -> list[Message]:
        with _lost_lock:
            held = _lost(state)
            lost = [held.pop(i) for i in message_ids if i in held]
        rest = set(message_ids) - {m.metadata.message_id for m in lost}
        replies = get_replies(state, rest, run_id) if rest else []
        unavailable = _module(UTILS).create_message_error_unavailable_res_message
        return replies + [unavailable(m.metadata, "node_unavail") for m in lost]

    return get_message_res


def _pending_in_memory(state: Any, node_id: int) -> list[str]:
    """Push sessions with objects still to come, of replies `node_id` sent."""
    with state._lock_object_push_sessions:
        sessions = list(state._object_push_sessions.items())
    with state.lock:
        replies = state.message_res_store
        return [
            session_id
            for session_id, session in sessions
            if session.pending_object_ids
            and any(
                (reply := replies.get(root)) is not None and reply.metadata.src_node_id == node_id
                for root in session.root_object_ids
            )
        ]


def _unanswered_in_memory(state: Any, node_id: int) -> list[Message]:
    """Messages `node_id` pulled and has no reply to."""
    with state.lock:
        return [
            message
            for message_id, message in state.message_ins_store.items()
            if message.metadata.dst_node_id == node_id
            and message.metadata.delivered_at
            and message_id not in state.message_ins_id_to_message_res_id
        ]


def _pending_in_sql(state: Any, node_id: int) -> list[str]:
    from flwr.supercore.utils import uint64_to_int64
    from sqlalchemy import select

    links, core = (_module(name) for name in SQL_MODELS)
    reply, root, push = links.MessageRes, core.ObjectPushSessionRoot, core.ObjectPushSession
    query = (
        select(root.session_id)
        .join(reply, reply.message_id == root.root_object_id)
        .join(push, push.session_id == root.session_id)
        .where(reply.src_node_id == uint64_to_int64(node_id), push.pending_count > 0)
        .distinct()
    )
    with state.session() as session:
        return list(session.scalars(query))


def _unanswered_in_sql(state: Any, node_id: int) -> list[Message]:
    from flwr.supercore.utils import uint64_to_int64
    from sqlalchemy import exists, select

    sql, links = _module(SQL), _module(SQL_MODELS[0])
    ins, res = links.MessageIns, links.MessageRes
    query = select(ins).where(
        ins.dst_node_id == uint64_to_int64(node_id),
        ins.delivered_at != "",
        ~exists().where(res.reply_to_message_id == ins.message_id),
    )
    messages = []
    with state.session() as session:
        for model in session.scalars(query).all():
            row = sql._message_model_to_dict(model)
            sql.convert_sint64_values_in_dict_to_uint64(row, UINT64_COLUMNS)
            messages.append(sql.dict_to_message(row))
    return messages
