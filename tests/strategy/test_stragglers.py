"""Straggler budgets applied to a round's plan (server_app.stragglers): inactive clients get no
message, incomplete ones train their budget or are dropped, and the metrics say who was what."""

from __future__ import annotations

from flwr.app import ArrayRecord

from fl_system.learning.stragglers import round_budget
from fl_system.messages import protocol
from server_app.stragglers import Stragglers
from tests.mock_replies import plan

NODES = {100 + pid: pid for pid in range(40)}
STRAGGLERS = Stragglers(seed=3, steps=10, incomplete=0.5, inactive=0.2)


def _budgets(rnd: int) -> dict[int, int]:
    return {
        pid: round_budget(
            seed=3, server_round=rnd, partition=pid, steps=10, incomplete=0.5, inactive=0.2
        )
        for pid in NODES.values()
    }


def test_partial_work_trains_incomplete_clients_for_their_budget() -> None:
    budgets = _budgets(4)
    out = STRAGGLERS.apply(plan(NODES, ArrayRecord(), rnd=4), partial_work=True)
    assert sorted(out.nodes.values()) == [p for p, s in budgets.items() if s > 0]
    assert {p: c[protocol.LOCAL_STEPS] for p, c in out.node_config.items()} == {
        p: s for p, s in budgets.items() if 0 < s < 10
    }
    assert out.metrics["inactive"] == sum(s == 0 for s in budgets.values()) > 0
    assert out.metrics["incomplete"] == sum(0 < s < 10 for s in budgets.values()) > 0
    assert out.metrics["dropped_incomplete"] == 0
    assert all(out.metrics[f"budget_{p}"] == s for p, s in budgets.items())


def test_without_partial_work_incomplete_clients_are_dropped() -> None:
    budgets = _budgets(4)
    out = STRAGGLERS.apply(plan(NODES, ArrayRecord(), rnd=4), partial_work=False)
    assert sorted(out.nodes.values()) == [p for p, s in budgets.items() if s == 10]
    assert out.node_config == {}
    assert out.metrics["dropped_incomplete"] == out.metrics["incomplete"] > 0


def test_budgets_are_the_same_for_every_algorithm_and_change_with_the_round() -> None:
    a = STRAGGLERS.apply(plan(NODES, ArrayRecord(), rnd=2), partial_work=True)
    b = STRAGGLERS.apply(plan(NODES, ArrayRecord(), rnd=2), partial_work=False)
    c = STRAGGLERS.apply(plan(NODES, ArrayRecord(), rnd=3), partial_work=True)
    budget_keys = [k for k in a.metrics if k.startswith("budget_")]
    assert [a.metrics[k] for k in budget_keys] == [b.metrics[k] for k in budget_keys]
    assert [a.metrics[k] for k in budget_keys] != [c.metrics[k] for k in budget_keys]
