"""The SQL SuperLink answers a node's pull that cannot find anything from memory, and never
misses a message: one stored after an empty pull, or while a pull was reading SQL, is
delivered at the node's next pull. Expired task tokens are swept at most every SWEEP_SECONDS."""

from __future__ import annotations

from pathlib import Path

import pytest
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.corestate.sql_corestate import SqlCoreState

from fl_system.flower import sql_state
from tests.unit.test_returning_nodes import Link, state_on


@pytest.fixture
def unhooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's SQL state classes as they were, once the test is over."""
    for name in ("get_message_ins", *sql_state.MESSAGE_WRITES):
        monkeypatch.setattr(SqlLinkState, name, getattr(SqlLinkState, name))
    sweep = SqlCoreState._cleanup_expired_task_tokens
    monkeypatch.setattr(SqlCoreState, "_cleanup_expired_task_tokens", sweep)


@pytest.fixture
def link(tmp_path: Path, unhooked: None) -> Link:
    sql_state.cheaper_calls()
    return Link(state_on(str(tmp_path / "link.db")))


def _claims(link: Link, monkeypatch: pytest.MonkeyPatch, during=None) -> list[int]:
    """Count the SQL claims of messages (Flower's UPDATE ... RETURNING); `during` runs inside
    each one, after its SQL read."""
    calls: list[int] = []
    claim = link.state._claim_message_ins_rows

    def counted(node_id: int, limit: int | None, run_id: int | None = None) -> list:
        calls.append(node_id)
        rows = claim(node_id, limit, run_id)
        if during is not None:
            during()
        return rows

    monkeypatch.setattr(link.state, "_claim_message_ins_rows", counted)
    return calls


def _pulled(link: Link, node: int) -> list[str]:
    return [m.metadata.message_id for m in link.state.get_message_ins(node, 1)]


def test_empty_pulls_skip_sql_until_a_message_is_stored(
    link: Link, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, other = link.node(), link.node()
    claims = _claims(link, monkeypatch)
    for _ in range(5):
        assert _pulled(link, node) == [] and _pulled(link, other) == []
    assert claims == [node, other]  # once each; the other pulls were answered from memory
    message = link.send(node, pulled=False)
    assert _pulled(link, node) == [message.metadata.message_id]
    assert _pulled(link, node) == [] and _pulled(link, node) == []
    assert claims == [node, other, node, node]


def test_a_message_stored_while_a_pull_reads_sql_comes_at_the_next_pull(
    link: Link, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = link.node()
    stored: list[str] = []

    def store_once() -> None:  # commits after the pull's SQL read: that pull cannot see it
        if not stored:
            stored.append(link.send(node, pulled=False).metadata.message_id)

    _claims(link, monkeypatch, during=store_once)
    assert _pulled(link, node) == []
    assert _pulled(link, node) == stored


def test_expired_task_tokens_are_swept_at_most_every_sweep_seconds(
    tmp_path: Path, unhooked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower swept them before nearly every call (each object pushed or pulled). On a clock
    that moves 1/16 s a call, 12 calls over 0.75 s sweep at 0.25, 0.5 and 0.75 s only."""
    sweeps: list[float] = []
    flowers = SqlCoreState._cleanup_expired_task_tokens

    def counted(state) -> None:
        sweeps.append(sql_state._memo(state).swept)  # the wrapper's own clock read
        flowers(state)

    clock = _Clock(1000.0)
    monkeypatch.setattr(sql_state, "time", clock)
    monkeypatch.setattr(SqlCoreState, "_cleanup_expired_task_tokens", counted)
    monkeypatch.setattr(sql_state, "SWEEP_SECONDS", 0.25)
    sql_state.cheaper_calls()
    link = Link(state_on(str(tmp_path / "link.db")))
    assert link.run_id in link.state.get_run_status({link.run_id})  # swept by now, at 1000.0
    sweeps.clear()
    for _ in range(12):
        clock.now += 0.0625
        assert link.run_id in link.state.get_run_status({link.run_id})
    assert [t - 1000.0 for t in sweeps] == [0.25, 0.5, 0.75]


class _Clock:
    """time.monotonic as sql_state reads it, moved by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_installing_twice_wraps_once(unhooked: None) -> None:
    sql_state.cheaper_calls()
    once = SqlLinkState.get_message_ins, SqlCoreState._cleanup_expired_task_tokens
    sql_state.cheaper_calls()
    assert (SqlLinkState.get_message_ins, SqlCoreState._cleanup_expired_task_tokens) == once
    assert sql_state.problems() == []
