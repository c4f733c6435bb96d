"""NodeRegistry on a scripted grid: who holds which partition, and who is turned away."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from flwr.app import Error, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode

from fl_system.messages import protocol
from fl_system.records.run_log import warning_line
from server_app import nodes
from server_app.nodes import NodeRegistry
from server_app.rounds import RunFailed


class ScriptedGrid:
    """Answers every pushed message at once with `answer(message)`, as nodes would."""

    def __init__(self, node_ids: set[int], answer: Callable[[Message], Message | None]) -> None:
        self.node_ids = node_ids
        self.answer = answer
        self.sent: list[Message] = []
        self._replies: dict[str, Message] = {}

    def get_node_ids(self) -> set[int]:
        return set(self.node_ids)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{len(self.sent)}"  # as the SuperLink does
            self.sent.append(msg)
            reply = self.answer(msg)
            if reply is not None:
                self._replies[msg.metadata.message_id] = reply
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """Replies in the order their messages were pushed (first come, first served)."""
        wanted = set(message_ids)
        return [self._replies.pop(i) for i in list(self._replies) if i in wanted]


def nodes_claiming(partition_of: dict[int, int]) -> Callable[[Message], Message | None]:
    def answer(msg: Message) -> Message | None:
        node = msg.metadata.dst_node_id
        if msg.metadata.message_type == protocol.HANDSHAKE:
            metrics = MetricRecord({protocol.PARTITION_ID: partition_of[node]})
            return Message(RecordDict({protocol.METRICS: metrics}), reply_to=msg)
        return Message(RecordDict(), reply_to=msg)  # probes and notices

    return answer


def _notices(grid: ScriptedGrid) -> dict[int, str]:
    return {
        m.metadata.dst_node_id: str(m.content.config_records[protocol.CONFIG][protocol.REASON])
        for m in grid.sent
        if m.metadata.message_type == protocol.TURN_AWAY
    }


def test_a_second_node_with_a_held_partition_is_turned_away_and_told_why() -> None:
    grid = ScriptedGrid({11, 22, 33}, nodes_claiming({11: 0, 22: 1, 33: 1}))
    registry = NodeRegistry(grid, "{}", num_partitions=3)
    assert registry.refresh(timeout=5) == {11: 0, 22: 1}
    assert _notices(grid) == {
        33: "partition-id 1 is already held by live node 22 (each SuperNode needs its own "
        "partition-id)"
    }
    # a turned-away node is not asked again before its wait is over
    sent = len(grid.sent)
    assert registry.refresh(timeout=5) == {11: 0, 22: 1}
    assert len(grid.sent) == sent


def test_a_partition_outside_the_run_is_turned_away() -> None:
    grid = ScriptedGrid({11, 22}, nodes_claiming({11: 0, 22: 7}))
    registry = NodeRegistry(grid, "{}", num_partitions=2)
    assert registry.refresh(timeout=5) == {11: 0}
    assert _notices(grid) == {22: "partition-id 7 is outside 0..1 (this run has num_clients=2)"}


def test_a_node_started_for_another_partitioning_is_turned_away_before_it_claims() -> None:
    """Node 11 was started with num-partitions=2 (another run's split) and claims partition
    0 of this 5-client run first: turned away, so node 22, started for this run, holds it
    (11 would have failed every training message: its partition is another split's)."""

    def answer(msg: Message) -> Message | None:
        reply = nodes_claiming({11: 0, 22: 0})(msg)
        if msg.metadata.message_type == protocol.HANDSHAKE and reply is not None:
            started_for = 2 if msg.metadata.dst_node_id == 11 else 5
            reply.content.metric_records[protocol.METRICS][protocol.NUM_PARTITIONS] = started_for
        return reply

    grid = ScriptedGrid({11, 22}, answer)
    registry = NodeRegistry(grid, "{}", num_partitions=5)
    assert registry.refresh(timeout=5) == {22: 0}
    assert _notices(grid) == {
        11: "it was started with num-partitions=2, this run has num_clients=5"
    }


def test_a_silent_holder_loses_its_partition_to_a_restarted_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nodes, "PROBE_SECONDS", 0.05)
    alive = {11, 22}
    claims = {11: 0, 22: 1, 44: 1}  # 44: node 22 restarted with a new id

    def answer(msg: Message) -> Message | None:
        if msg.metadata.dst_node_id not in alive:
            return None  # a dead node never replies
        return nodes_claiming(claims)(msg)

    grid = ScriptedGrid({11, 22}, answer)
    registry = NodeRegistry(grid, "{}", num_partitions=2)
    assert registry.refresh(timeout=5) == {11: 0, 22: 1}
    alive, grid.node_ids = {11, 44}, {11, 22, 44}  # 22's id lingers until its heartbeat expires
    assert registry.refresh(timeout=5) == {11: 0, 44: 1}
    assert _notices(grid) == {}


def test_too_few_supernodes_are_counted_and_the_setting_named(monkeypatch) -> None:
    grid = ScriptedGrid({11, 22}, nodes_claiming({11: 0, 22: 1}))
    registry = NodeRegistry(grid, "{}", num_partitions=10)
    monkeypatch.setattr(nodes.time, "sleep", lambda _: None)
    with pytest.raises(TimeoutError) as err:
        registry.wait_for(10, timeout=0.01)
    assert str(err.value) == (
        "only 2 of 10 clients connected after 0 s: the federation has 2 SuperNodes; set "
        "num_clients=2 (or clients_per_round), or start more SuperNodes (Flower's simulation: "
        "options.num-supernodes)"
    )


def test_a_clientapp_failing_on_every_node_stops_the_wait_with_its_error(monkeypatch) -> None:
    reason = "<class 'DataError'>:<'load_data must return (train, test), got int'>"

    def failing(msg: Message) -> Message:
        return Message(
            Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg
        )

    def unavailable(msg: Message) -> Message:
        return Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="gone"), reply_to=msg)

    monkeypatch.setattr(nodes.time, "sleep", lambda _: None)
    grid = ScriptedGrid({11, 22}, failing)
    with pytest.raises(RunFailed) as err:
        NodeRegistry(grid, "{}", num_partitions=2).wait_for(2, timeout=600)
    assert str(err.value) == (
        "the ClientApp failed the handshake on all 2 SuperNodes: DataError: load_data must "
        "return (train, test), got int (each node's log has its traceback)"
    )
    # Flower's simulation (Ray) gives the traceback: the exception raised is what is said
    traceback = (
        "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'ray::ClientAppActor.run()\n"
        'Traceback (most recent call last):\n  File "task.py", line 28, in load_data\n'
        "FileNotFoundError: /data/site-a/digits.npz\n\nThe above exception was the direct "
        "cause of the following exception:\nflwr.clientapp.client_app.ClientAppException: \n'>"
    )
    reason = traceback
    grid = ScriptedGrid({11, 22}, failing)
    with pytest.raises(
        RunFailed, match=r"SuperNodes: FileNotFoundError: /data/site-a/digits.npz \("
    ):
        NodeRegistry(grid, "{}", num_partitions=2).wait_for(2, timeout=600)
    # a ClientApp whose process died (Flower's simulation on Ray: an UNKNOWN error) is as
    # broken: said at once, not after round_timeout
    reason = (
        "<class 'ray.exceptions.ActorDiedError'>:<'The actor died unexpectedly before finishing "
        "this task.\n\tclass_name: ClientAppActor\nThe actor is dead because its worker "
        "process has died.'>"
    )

    def died(msg: Message) -> Message:
        return Message(Error(code=ErrorCode.UNKNOWN, reason=reason), reply_to=msg)

    grid = ScriptedGrid({11, 22}, died)
    with pytest.raises(RunFailed) as err:
        NodeRegistry(grid, "{}", num_partitions=2, logs="logs/serverapp.log has it").wait_for(
            2, timeout=600
        )
    assert str(err.value) == (
        "the ClientApp failed the handshake on all 2 SuperNodes: ray.exceptions.ActorDiedError: "
        "The actor died unexpectedly before finishing this task. (logs/serverapp.log has it)"
    )
    # while some node may still join healthy, or the nodes are unreachable (they may come
    # back), the wait goes on to its timeout
    for answer, count in ((failing, 3), (unavailable, 2)):
        grid = ScriptedGrid({11, 22}, answer)
        with pytest.raises(TimeoutError) as timeout:
            NodeRegistry(grid, "{}", num_partitions=count).wait_for(count, timeout=0.01)
        if answer is failing:  # the timeout says what the nodes that answered raised
            assert str(timeout.value).endswith(
                "federation has 2 SuperNodes; 2 failed the handshake: "
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
                "this task. (each node's log has its traceback)"
            )


def sites_refusing(refusals: dict[int, str]) -> Callable[[Message], Message | None]:
    """Nodes 11, 22, 33... holding partitions 0, 1, 2...; those in `refusals` refuse the run
    as a site's check does (Flower's INVALID_FAB error reply with the site's reason)."""
    claiming = nodes_claiming({11: 0, 22: 1, 33: 2})

    def answer(msg: Message) -> Message | None:
        reason = refusals.get(msg.metadata.dst_node_id)
        if reason is None:
            return claiming(msg)
        return Message(Error(code=ErrorCode.INVALID_FAB, reason=reason), reply_to=msg)

    return answer


def test_a_site_refusing_the_run_is_left_out_said_once_and_the_run_goes_on(monkeypatch) -> None:
    said: list[str] = []
    clock = Clock()
    monkeypatch.setattr(nodes.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(nodes.time, "sleep", clock.sleep)
    refusal = "site_b: requires secagg=secaggplus (this run has secagg=none)"
    grid = ScriptedGrid({11, 22, 33}, sites_refusing({22: refusal}))
    registry = NodeRegistry(grid, "{}", num_partitions=3, say=said.append)
    assert registry.wait_for(2, timeout=600) == {11: 0, 33: 2}  # a round of 2 goes on
    clock.now += nodes.RETRY_SECONDS
    assert registry.refresh(timeout=5) == {11: 0, 33: 2}  # asked again, refused again
    asked = [
        m.metadata.dst_node_id for m in grid.sent if m.metadata.message_type == protocol.HANDSHAKE
    ]
    assert asked.count(22) == 2
    warned = [line for line in said if "refused" in line]
    assert warned == [warning_line(f"node 22 refused this run: {refusal}")]


def test_refusals_that_leave_too_few_stop_the_run_with_every_site_reason(monkeypatch) -> None:
    monkeypatch.setattr(nodes.time, "sleep", lambda _: None)
    a, b = "site_a: accepts at most 5 rounds (this run has num_rounds=9)", "site_b: no"
    grid = ScriptedGrid({11, 22, 33}, sites_refusing({11: a, 22: b}))
    with pytest.raises(RunFailed) as err:
        NodeRegistry(grid, "{}", num_partitions=3).wait_for(2, timeout=600)
    assert str(err.value) == (
        f"2 of 3 SuperNodes refused this run and a round needs 2 clients, 1 remain: "
        f"node 11: {a}; node 22: {b}"
    )
    grid = ScriptedGrid({11, 22, 33}, sites_refusing({11: a, 22: b, 33: b}))
    with pytest.raises(RunFailed) as err:
        NodeRegistry(grid, "{}", num_partitions=3).wait_for(3, timeout=600)
    assert str(err.value) == (
        f"all 3 SuperNodes refused this run: node 11: {a}; node 22: {b}; node 33: {b}"
    )
    # while not every partition's node is there, one yet to come may take it: the wait goes
    # on, its timeout naming the refusals
    grid = ScriptedGrid({11, 22}, sites_refusing({11: a}))
    with pytest.raises(TimeoutError) as timeout:
        NodeRegistry(grid, "{}", num_partitions=3).wait_for(2, timeout=0.01)
    assert f"1 refused this run: node 11: {a}" in str(timeout.value)


class Clock:
    """time.monotonic and time.sleep for the registry, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_node_whose_handshake_was_lost_is_asked_again_and_taken_back(monkeypatch) -> None:
    """With SuperNode authentication a restarted node keeps its id: the node that was down when
    the run handshaked it (the SuperLink answered "node unavailable") is asked again once
    RETRY_SECONDS have passed, and joins; the wait doubles while it stays unreachable."""
    clock = Clock()
    monkeypatch.setattr(nodes, "time", clock)
    down = {22}

    def answer(msg: Message) -> Message:
        if msg.metadata.dst_node_id in down:
            return Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="gone"), reply_to=msg)
        return nodes_claiming({11: 0, 22: 1})(msg)

    grid = ScriptedGrid({11, 22}, answer)
    registry = NodeRegistry(grid, "{}", num_partitions=2)
    asked = []

    def refresh_at(t: float) -> dict[int, int]:
        clock.now = 1000.0 + t
        before = len(grid.sent)
        got = registry.refresh(timeout=5)
        asked.append((t, sorted(m.metadata.dst_node_id for m in grid.sent[before:])))
        return got

    assert refresh_at(0) == {11: 0}
    assert refresh_at(9.9) == {11: 0}  # within its wait: not asked
    assert refresh_at(10) == {11: 0}  # asked again, still down: the wait doubles to 20 s
    assert refresh_at(29.9) == {11: 0}
    down.clear()  # node 22 is back with the same id
    assert refresh_at(30) == {11: 0, 22: 1}
    assert asked == [(0, [11, 22]), (9.9, []), (10, [22]), (29.9, []), (30, [22])]
    assert nodes.RETRY_SECONDS == 10.0


def test_a_node_left_out_that_goes_offline_is_asked_at_once_when_it_returns(monkeypatch):
    """A turned-away node (a partition clash) that leaves and comes back with the same id,
    its command corrected, is handshaked as soon as it is online again."""
    clock = Clock()
    monkeypatch.setattr(nodes, "time", clock)
    claims = {11: 0, 22: 0}
    grid = ScriptedGrid({11, 22}, nodes_claiming(claims))
    registry = NodeRegistry(grid, "{}", num_partitions=2)
    assert registry.refresh(timeout=5) == {11: 0}
    assert set(_notices(grid)) == {22}
    grid.node_ids = {11}  # its fl-client stopped on the notice
    assert registry.refresh(timeout=5) == {11: 0}
    grid.node_ids, claims[22] = {11, 22}, 1  # restarted with --partition-id 1, 1 s later
    clock.now += 1
    assert registry.refresh(timeout=5) == {11: 0, 22: 1}


def test_joins_and_leaves_are_said_with_node_and_partition() -> None:
    grid = ScriptedGrid({11, 22}, nodes_claiming({11: 0, 22: 1, 44: 1}))
    said: list[str] = []
    registry = NodeRegistry(grid, "{}", num_partitions=2, say=said.append)
    registry.refresh(timeout=5)
    grid.node_ids = {11}
    registry.refresh(timeout=5)
    grid.node_ids = {11, 44}
    registry.refresh(timeout=5)
    assert said == [
        "node 11 joins as partition 0",
        "node 22 joins as partition 1",
        "node 22 (partition 1) left",
        "node 44 joins as partition 1 (before: node 22)",  # restarted without a key: a new id
    ]


def test_a_node_reported_gone_that_is_back_with_its_id_is_handshaked_again() -> None:
    """Killed and restarted between two refreshes, a node with a registered key is online
    with the same id each time the server looks; the SuperLink's "node unavailable" replies
    of the round (Courier.take_gone) say it went away, and it is handshaked again."""
    grid = ScriptedGrid({11, 22}, nodes_claiming({11: 0, 22: 1}))
    said: list[str] = []
    registry = NodeRegistry(grid, "{}", num_partitions=2, say=said.append)
    registry.refresh(timeout=5)
    sent, said[:] = len(grid.sent), []
    assert registry.refresh(timeout=5, gone={22}) == {11: 0, 22: 1}
    assert [m.metadata.dst_node_id for m in grid.sent[sent:]] == [22]
    assert said == [
        "node 22 (partition 1) left",
        "node 22 returns with partition 1",
    ]
