"""Nodes that come and go during a 40-round run across network namespaces (TLS, SuperNode
authentication): SIGKILLs of fl-supernode, of fl-client and of a whole host, a node down at
its handshake, a key unregistered and a newcomer registered, at moments drawn from a seed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from fl_system.results import MetricsLog
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
    nodes = churn.Churn(federation, HOSTS, num_partitions=len(HOSTS))
    nodes.start_nodes()
    for node in nodes.every_node:
        assert churn.wait_for_admission(node, 90), node.log.read_text()
    run_dir, out = federation.work / "run", federation.work / "fl-run.log"
    nodes.fire(plan.events[0], 0)  # down when the run handshakes it
    run = churn.fl_run(federation, run_dir, ROUNDS, len(HOSTS), out)
    # a second node claiming a held partition is turned away and told by whom
    claimant, claimant_log = federation.client(
        "server", 0, key=federation.certs / "supernode-4.key", num_partitions=len(HOSTS)
    )
    try:
        nodes.follow(plan, run, run_dir)
    finally:
        if run.poll() is None:
            run.kill()
        nodes.stop()
    assert run.wait() == 0, out.read_text()[-3000:]
    assert "final accuracy" in out.read_text()
    for name in ("summary.json", "checkpoint.npz", "curve.png", "config.yaml"):
        assert (run_dir / name).is_file(), name
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert len(rows) == ROUNDS
    assert claimant.wait(timeout=60) == 2
    assert "fl-client: error: partition-id 0 is already held by live node" in (
        claimant_log.read_text()
    )
    report = []
    for event in plan.events:
        assert event.returned_rows is not None, f"{event.kind} {event.partition}: never admitted"
        back = churn.first_round_back(rows, event)
        report.append((event.kind, event.partition, event.returned_rows, back))
        assert back is not None and back <= 2, report
    # every join, loss and return is on the server's log, by partition
    lines = churn.log_lines(run_dir / "logs" / "serverapp.log")
    kills = [e for e in plan.events if e.kind != "before"]
    assert Counter(lines["left"]) == Counter(e.partition for e in kills), lines
    assert Counter(lines["returns"]) == Counter(e.partition for e in kills if e.kind != "leave"), (
        lines
    )
    newcomer = next(e for e in plan.events if e.kind == "leave").partition
    assert Counter(lines["joins"]) == Counter([*range(len(HOSTS)), newcomer]), lines
    assert nodes.left_in_namespaces() == {}
    newcomer_key = federation.work / "newcomer-keys" / "newcomer.key"
    assert newcomer_key.stat().st_mode & 0o777 == 0o600  # made on its own host, kept private
    # registered now: supernode-0..4 less the one unregistered, and the newcomer
    listed = federation.tool("server", "fl-server", "nodes", *federation.control)
    assert len(listed.stdout.splitlines()) == 5, listed.stdout
