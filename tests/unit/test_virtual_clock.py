"""The virtual clock by hand: client and round times, deadlines, first k, sessions, profiles.

The hand-computed round: three clients, 1 MB down and 1 MB up each, 10 steps of batch 32.
  client 0: 0.01 s/sample, up 1 MB/s, down 2 MB/s, 50 ms
     down 0.05 + 0.5 = 0.55, compute 10 x 32 x 0.01 = 3.2, up 0.05 + 1.0 = 1.05 -> 4.8 s
  client 1: 0.02 s/sample, up 0.5 MB/s, down 1 MB/s, 100 ms
     down 0.1 + 1.0 = 1.1, compute 6.4, up 0.1 + 2.0 = 2.1 -> 9.6 s
  client 2: 0.005 s/sample, up 0.25 MB/s, down 4 MB/s, no latency
     down 0.25, compute 1.6, up 4.0 -> 5.85 s
The round lasts 9.6 s; with first_k = 2, 5.85 s; with a 6 s deadline client 1 misses it
(the round lasts 6 s), and 4 of its steps would fit: spare 6 - 3.2 = 2.8 s at 0.64 s a step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from fl_system.heterogeneity import SystemModel
from fl_system.heterogeneity.availability import Availability, Sessions, drawn_sessions
from fl_system.heterogeneity.clock import (
    Profile,
    client_seconds,
    first_finishers,
    megabits,
    round_seconds,
    steps_within,
)
from fl_system.heterogeneity.profiles import ProfileMix, Spread
from fl_system.messages import protocol
from server_app.exchange import NodeMessages
from server_app.rounds import RoundPlan
from server_app.virtual_clock import VirtualClock
from tests.mock_replies import reply

MB = 1_000_000
PROFILES = {
    0: Profile(0.01, 1e6, 2e6, 0.05),
    1: Profile(0.02, 0.5e6, 1e6, 0.1),
    2: Profile(0.005, 0.25e6, 4e6, 0.0),
}
EXPECTED = {0: 4.8, 1: 9.6, 2: 5.85}


def test_each_client_time_by_hand() -> None:
    for pid, profile in PROFILES.items():
        t = client_seconds(profile, down=[MB], up=[MB], steps=10, batch_size=32)
        assert t == pytest.approx(EXPECTED[pid], rel=1e-12)


def test_the_round_is_its_slowest_its_kth_or_its_deadline() -> None:
    assert round_seconds(EXPECTED) == pytest.approx(9.6)
    assert round_seconds(EXPECTED, first_k=2) == pytest.approx(5.85)
    assert first_finishers(EXPECTED, 2) == [0, 2]
    counted = {0: 4.8, 2: 5.85}  # client 1 missed the 6 s deadline: the server waited for it
    assert round_seconds(counted, deadline=6.0, missed_deadline=True) == 6.0
    assert round_seconds(counted, deadline=6.0, missed_deadline=False) == pytest.approx(5.85)
    assert round_seconds({}, deadline=6.0, missed_deadline=True) == 6.0
    assert round_seconds({}) == 0.0


def test_steps_that_fit_a_deadline_by_hand() -> None:
    fit = {
        pid: steps_within(6.0, p, down=[MB], up=[MB], batch_size=32, steps=10)
        for pid, p in PROFILES.items()
    }
    # 0: spare 6 - 1.6 = 4.4 s at 0.32 s a step = 13 -> all 10; 1: 2.8 / 0.64 -> 4;
    # 2: spare 6 - 4.25 = 1.75 s at 0.16 s a step -> 10 (10.9)
    assert fit == {0: 10, 1: 4, 2: 10}
    assert steps_within(3.0, PROFILES[1], down=[MB], up=[MB], batch_size=32, steps=10) == 0
    # exactly on the deadline: 6 steps of client 0 take 1.6 + 6 x 0.32 = 3.52 s
    assert steps_within(3.52, PROFILES[0], down=[MB], up=[MB], batch_size=32, steps=10) == 6


@pytest.mark.parametrize("scale", [1e-9, 1.0, 1e9])
def test_times_scale_with_bytes_and_bandwidth_alike(scale: float) -> None:
    p = Profile(0.0, 1e6 * scale, 2e6 * scale, 0.0)
    assert client_seconds(p, down=[2e6 * scale], up=[3e6 * scale], steps=0, batch_size=1) == (
        pytest.approx(4.0, rel=1e-12)
    )


def test_megabits_are_bits_per_second() -> None:
    assert megabits(8.0) == 1e6


def _system(**rules: object) -> SystemModel:
    base: dict = dict(
        profiles=PROFILES,
        batch_size=32,
        local_steps=10,
        deadline=None,
        first_k=None,
        availability=None,
    )
    return SystemModel(**{**base, **rules})


def _round(clock: VirtualClock, **kwargs: object) -> tuple[list[Message], dict]:
    """Clients 0-2 on nodes 100-102 each get and send 1 MB and report 10 steps."""
    plan = RoundPlan(
        round=1,
        arrays=ArrayRecord({"w": Array(np.zeros(MB // 4, dtype=np.float32))}),
        config=ConfigRecord(),
        nodes={100 + p: p for p in clock.online(1, [0, 1, 2])},
    )
    plan = clock.fit_deadline(plan, partial_work=bool(kwargs.get("partial_work")))
    replies = [
        reply(node, [np.zeros(1)], partition_id=pid, num_examples=1, metrics={"num-steps": 10})
        for node, pid in plan.nodes.items()
    ]
    messages = {node: NodeMessages([MB], [MB]) for node in plan.nodes}
    kept = clock.settle(plan, replies, messages)
    return kept, clock.close()


def test_the_clock_times_a_round_from_the_courier_bytes_and_reported_steps() -> None:
    clock = VirtualClock(_system())
    kept, columns = _round(clock)
    assert len(kept) == 3
    assert columns["virtual_seconds"] == pytest.approx(9.6)
    assert [columns[f"vtime_{p}"] for p in range(3)] == pytest.approx([4.8, 9.6, 5.85])
    _, again = _round(clock)
    assert again["virtual_clock"] == pytest.approx(19.2)


def test_first_k_keeps_the_first_finishers_and_ends_at_the_kth() -> None:
    kept, columns = _round(VirtualClock(_system(first_k=2)))
    assert sorted(m.content[protocol.METRICS][protocol.PARTITION_ID] for m in kept) == [0, 2]
    assert columns["virtual_seconds"] == pytest.approx(5.85)
    assert columns["late_discarded"] == 1


def test_a_deadline_drops_or_cuts_a_slow_client() -> None:
    clock = VirtualClock(_system(deadline=6.0))
    clock.estimate = (MB, MB)  # the bytes the last round's messages weighed
    kept, columns = _round(clock, partial_work=False)
    assert len(kept) == 2  # client 1 could not do all 10 steps: not sent
    assert columns["virtual_seconds"] == 6.0
    whole = VirtualClock(_system(deadline=6.0))
    whole.estimate = (MB, MB)
    three = RoundPlan(1, ArrayRecord(), ConfigRecord(), {100: 0, 101: 1, 102: 2})
    dropped = whole.fit_deadline(three, partial_work=False)
    assert dropped.metrics["deadline_dropped"] == 1
    budgets = [dropped.metrics[f"budget_{p}"] for p in range(3)]
    assert budgets == [10, 0, 10]  # client 1 was sent nothing, though 4 steps would fit
    cut = VirtualClock(_system(deadline=6.0))
    cut.estimate = (MB, MB)
    plan = cut.fit_deadline(three, partial_work=True)
    assert plan.node_config == {1: {protocol.LOCAL_STEPS: 4}}
    assert plan.metrics["deadline_partial"] == 1 and plan.metrics["deadline_dropped"] == 0
    assert [plan.metrics[f"budget_{p}"] for p in range(3)] == [10, 4, 10]


def test_a_reply_past_the_deadline_is_a_failure_with_its_reason() -> None:
    clock = VirtualClock(_system(deadline=7.0))
    clock.estimate = (0.0, 0.0)  # far too low: client 1 looks done in 6.6 s, is sent 10 steps
    kept, columns = _round(clock)
    late = [m for m in kept if protocol.REJECTED in m.content.config_records]
    assert len(late) == 1
    reason = late[0].content.config_records[protocol.REJECTED][protocol.REASON]
    assert reason == "missed the round deadline: would finish at 9.6 s of 7.0 s"
    assert columns["missed_deadline"] == 1 and columns["virtual_seconds"] == 7.0


def test_sessions_from_a_hand_written_trace() -> None:
    """Client 0 online [0, 5) and [20, 30); client 1 [3, 8) repeating every 10 s."""
    availability = Availability(
        {0: Sessions([(0, 5), (20, 30)]), 1: Sessions([(3, 8)], period=10.0)}
    )
    assert availability.online([0, 1], 0.0) == [0]
    assert availability.online([0, 1], 4.0) == [0, 1]
    assert availability.online([0, 1], 9.0) == []
    assert availability.online([0, 1], 14.0) == [1]  # 14 mod 10 = 4
    assert availability.next_online([0, 1], 9.0) == 13.0
    assert availability.next_online([0], 31.0) == math.inf
    assert availability.session_end(0, 21.0) == 30.0
    assert availability.session_end(1, 25.0) == 28.0
    assert availability.session_end(0, 10.0) == 10.0  # offline: it ends at once


def test_a_round_samples_among_the_online_and_fails_one_that_goes_offline() -> None:
    sessions = {0: Sessions([(0, 100)]), 1: Sessions([(0, 100)]), 2: Sessions([(0, 5)])}
    clock = VirtualClock(_system(availability=Availability(sessions)))
    kept, columns = _round(clock)
    offline = [m for m in kept if protocol.REJECTED in m.content.config_records]
    assert len(offline) == 1  # client 2 needs 5.85 s, its session ends at 5
    reason = offline[0].content.config_records[protocol.REJECTED][protocol.REASON]
    assert reason == "went offline at virtual second 5, before finishing at 6"
    assert columns["went_offline"] == 1 and columns["online"] == 3
    assert columns["virtual_seconds"] == pytest.approx(9.6)
    clock.now = 200.0  # nobody is online after 100: the round cannot start
    with pytest.raises(RuntimeError, match="no client is online at virtual second 200"):
        clock.online(2, [0, 1, 2])


def test_a_round_waits_for_clients_to_come_online() -> None:
    sessions = {p: Sessions([(50, 1000)]) for p in range(3)}
    clock = VirtualClock(_system(availability=Availability(sessions)))
    _, columns = _round(clock)
    assert columns["virtual_wait"] == 50.0
    assert columns["virtual_seconds"] == pytest.approx(59.6)
    assert columns["virtual_clock"] == pytest.approx(59.6)


def test_drawn_sessions_are_online_the_fraction_asked_and_repeat_with_the_seed() -> None:
    s = drawn_sessions(7, 3, fraction=0.25, mean_session=60.0)
    times = np.arange(0, 2_000_000, 97.0)
    share = np.mean([s.online(t) for t in times])
    assert share == pytest.approx(0.25, abs=0.02)
    again = drawn_sessions(7, 3, fraction=0.25, mean_session=60.0)
    assert [again.online(t) for t in times[:500]] == [s.online(t) for t in times[:500]]


def test_the_same_seed_gives_the_same_profiles_whatever_the_number_of_clients() -> None:
    mix = ProfileMix(Spread(5.0, 0.8), Spread(4.0, 0.5), Spread(12.0, 0.5), 28.0)
    a = [mix.draw(3, p, flops_per_sample=1e7) for p in range(5)]
    assert a == [mix.draw(3, p, flops_per_sample=1e7) for p in range(5)]
    assert a[2] == mix.draw(3, 2, flops_per_sample=1e7)
    assert a != [mix.draw(4, p, flops_per_sample=1e7) for p in range(5)]
    assert all(p.latency == 0.028 for p in a)
    fixed = ProfileMix(Spread(5.0, 0.0), Spread(4.0, 0.0), Spread(12.0, 0.0), 0.0).draw(0, 0, 1e7)
    assert fixed == Profile(1e7 / 5e9, 0.5e6, 1.5e6, 0.0)


def test_the_clock_state_survives_a_checkpoint() -> None:
    clock = VirtualClock(_system())
    _round(clock)
    restored = VirtualClock(_system())
    restored.load_state_dict(clock.state_dict())
    assert restored.now == clock.now and restored.estimate == clock.estimate
    assert all(VirtualClock.owns(k) for k in clock.state_dict())


def test_metrics_of_a_reply_are_its_steps() -> None:
    """A reply without a step count is charged the run's E."""
    plain = Message(
        RecordDict({protocol.METRICS: MetricRecord({protocol.PARTITION_ID: 0})}),
        reply_to=Message(RecordDict(), dst_node_id=100, message_type="train"),
    )
    clock = VirtualClock(_system())
    plan = RoundPlan(1, ArrayRecord(), ConfigRecord(), {100: 0})
    clock.online(1, [0])
    clock.settle(plan, [plain], {100: NodeMessages([MB], [MB])})
    assert clock.close()["vtime_0"] == pytest.approx(4.8)


def test_a_rule_whose_steps_cost_more_is_charged_for_them() -> None:
    """STEM takes two gradients a step (step_cost 2): client 0's compute doubles, 3.2 -> 6.4."""
    from server_app.strategies.stem import Stem

    _, columns = _round(VirtualClock(_system(), step_cost=Stem.step_cost))
    assert columns["vtime_0"] == pytest.approx(0.55 + 6.4 + 1.05)
    fit = VirtualClock(_system(deadline=6.0), step_cost=2.0)
    fit.estimate = (MB, MB)
    plan = fit.fit_deadline(
        RoundPlan(1, ArrayRecord(), ConfigRecord(), {100: 0}), partial_work=True
    )
    assert plan.node_config == {0: {protocol.LOCAL_STEPS: 6}}  # 4.4 s spare at 0.64 s a step
