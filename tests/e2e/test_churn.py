"""Nodes that come and go during a 40-round run across network namespaces (TLS, SuperNode
authentication): SIGKILLs of fl-supernode, of fl-client and of a whole host, a node down at
its handshake, a key unregistered and a newcomer registered, at moments drawn from a seed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from tests.e2e import churn
from tests.e2e.federation import Federation, started_federation
from tests.e2e.netns import unavailable

WHY_NOT = unavailable()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]

HOSTS = ["client-a", "client-b", "client-c", "client-d"]
SEED, ROUNDS = 7, 40


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with started_federation(tmp_path_factory.mktemp("churn"), HOSTS) as fed:
        yield fed


def test_a_run_completes_through_churn_and_takes_every_returning_node_back(
    federation: Federation,
) -> None:
    plan = churn.draw(SEED, ROUNDS, len(HOSTS), in_run=3)
    run_dir = federation.work / "run"
    # nodes beat every 2 s: a killed one is counted gone in 4 s, not fl-client's default 10
    outcome = churn.churned_run(federation, HOSTS, plan, run_dir, claimant=True, heartbeat=2)
    assert outcome.code == 0, outcome.output[-3000:]
    assert "final accuracy" in outcome.output
    for name in ("summary.json", "checkpoint.npz", "curve.png", "config.yaml"):
        assert (run_dir / name).is_file(), name
    assert len(outcome.rows) == ROUNDS
    # every node taken down came back and trained within 2 rounds of its return
    report = []
    for event in plan.events:
        assert event.returned_rows is not None, f"{event.kind} {event.partition}: never admitted"
        back = churn.first_round_back(outcome.rows, event)
        report.append((event.kind, event.partition, event.returned_rows, back))
        said = churn.said_of(run_dir / "logs" / "serverapp.log", event.partition)
        assert back is not None and back <= 2, (report, said)
    # every join, loss and return is on the server's log, by partition
    kills = [e for e in plan.events if e.kind != "before"]
    lines = outcome.lines
    assert Counter(lines["left"]) == Counter(e.partition for e in kills), lines
    returns = Counter(e.partition for e in kills if e.kind != "leave")
    assert Counter(lines["returns"]) == returns, lines
    newcomer = next(e for e in plan.events if e.kind == "leave").partition
    assert Counter(lines["joins"]) == Counter([*range(len(HOSTS)), newcomer]), lines
    assert outcome.leftovers == {}
    # a second node claiming a held partition was turned away and told by whom
    assert outcome.claimant is not None
    code, said = outcome.claimant
    assert code == 2 and "fl-client: error: partition-id 0 is already held by live node" in said
    newcomer_key = federation.work / "newcomer-keys" / "newcomer.key"
    assert newcomer_key.stat().st_mode & 0o777 == 0o600  # made on its own host, kept private
    # registered now: supernode-0..4 less the one unregistered, and the newcomer
    listed = federation.tool("server", "fl-server", "nodes", *federation.control)
    assert len(listed.stdout.splitlines()) == 5, listed.stdout
