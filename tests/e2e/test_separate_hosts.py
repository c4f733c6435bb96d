"""A federation across "machines": fl-server and fl-client in separate network namespaces,
TLS and SuperNode authentication on, a run submitted with `fl-run runtime=remote`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fl_system.deploy import certs
from fl_system.records.results import read_rows
from fl_system.runtime.launch.processes import alive, descendants
from tests.e2e import churn
from tests.e2e.federation import (
    BIN,
    Federation,
    started_federation,
    wait_for_text,
)
from tests.e2e.netns import unavailable

WHY_NOT = unavailable()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))]


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with started_federation(
        tmp_path_factory.mktemp("hosts"), ["client-a", "client-b", "client-c"], keys=10
    ) as fed:
        yield fed


def test_secure_aggregation_across_hosts_survives_a_node_killed_after_key_sharing(
    federation: Federation,
) -> None:
    """SecAgg+ over TLS between namespaces, 5 fl-clients on 3 hosts (keys 5-9), a threshold
    of 0.8 of the shares (4 of 5, 3 of 4, 2 of 2). Round 1: partition 4's SuperNode is
    SIGKILLed when its training message (after setup and key sharing) arrives: the round sums
    the other 4, its masks removed. Round 2: partitions 2 and 3 die the same way, leaving 2
    where 3 shares are needed: the round fails in one line and the model stays. Round 3 sums
    the 2 left."""
    hosts = ["client-a", "client-b", "client-c", "client-a", "client-b"]
    keys = [federation.certs / f"supernode-{5 + p}.key" for p in range(5)]
    beat = ("--heartbeat", "2")  # a killed node is counted gone 4 s after its last beat
    nodes = {
        p: federation.client(hosts[p], p, *beat, key=keys[p], num_partitions=5) for p in range(5)
    }
    for _, log in nodes.values():
        assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
    overrides = ["secagg=secaggplus", "secagg.reconstruction_threshold=0.8", "round_timeout=120"]
    overrides += ["clients.slow.ids=[2,3,4]", "clients.slow.seconds_per_step=0.4"]
    run_dir, out = federation.work / "secagg", federation.work / "secagg-fl-run.log"
    run = churn.fl_run(federation, run_dir, 3, 5, out, [*overrides, "train.local_steps=5"])
    # a round sends each node 4 training messages: setup, keys, training, unmasking
    kills = {4: 3, 3: 4 + 3, 2: 4 + 3}  # partition -> the training message it dies at
    try:
        deadline = time.monotonic() + 240
        while kills:
            assert run.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            for p, at in list(kills.items()):
                proc, log = nodes[p]
                if log.read_text().count("Receiving: train message") >= at:
                    # not waiting for its fl-client to exit: partitions 2 and 3 get their
                    # round-2 training messages together, and each must die before it replies
                    churn.kill_supernode(proc, wait=False)
                    del kills[p]
            time.sleep(0.02)
        for p in (2, 3, 4):
            nodes[p][0].wait(timeout=60)  # each fl-client exits once its SuperNode is gone
        assert run.wait(timeout=300) == 0, out.read_text()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
    rows = read_rows(run_dir / "metrics.csv")
    said = (run_dir / "logs" / "serverapp.log").read_text()
    summed = [(r["participants"], r.get("secagg_summed"), r.get("secagg_dropped")) for r in rows]
    assert summed == [("4", "4", "1"), ("0", "", ""), ("2", "2", "0")], said
    assert "round 2: secure aggregation failed: after training, 2 of 4 clients are left" in said
    assert "the model stays" in said
    for p in (0, 1):
        nodes[p][0].send_signal(signal.SIGTERM)
        assert nodes[p][0].wait(timeout=30) == 143


def test_a_client_with_an_unregistered_key_is_rejected(federation: Federation) -> None:
    stranger_key = federation.stranger / "supernode-0.key"
    # 20 s: attempts 5 s apart, then the countdown ends (12 s left no second attempt when the
    # first took over 7 s, on a loaded machine)
    proc, log = federation.client("client-c", 1, "--connect-timeout", "20", key=stranger_key)
    assert proc.wait(timeout=120) == 2
    text = log.read_text()
    # keys may still be registering when a SuperLink's ports open: retried, then given up
    assert "is not registered there (fl-server --authorized-keys DIR registers the .pub " in text
    assert "; retrying in 5 s (giving up in " in text
    assert "fl-client: error: the SuperLink refused this SuperNode: its --auth-key is not " in text


def test_a_client_without_the_federations_ca_cannot_connect(federation: Federation) -> None:
    # fl-client checks the server's certificate first and says what is wrong
    ours = federation.run_in(
        "client-c",
        [
            str(BIN / "fl-client"),
            "--server",
            federation.server,
            "--partition-id",
            "1",
            "--num-partitions",
            "2",
            "--root-certificates",
            str(federation.stranger / certs.CA_CERT),
        ],
        timeout=60,
    )
    assert ours.returncode == 2
    assert "is not signed by" in ours.stderr and "wrong CA certificate?" in ours.stderr
    # and Flower's own SuperNode, given the wrong CA, fails the handshake (and then lingers,
    # which is why fl-client watches for it)
    log = federation.work / "flower-supernode-wrong-ca.log"
    flower = federation.procs.start(
        "flower-supernode, wrong CA",
        federation.lan["client-c"].command(
            [
                str(BIN / "flower-supernode"),
                "--superlink",
                federation.server,
                "--root-certificates",
                str(federation.stranger / certs.CA_CERT),
                "--auth-supernode-private-key",
                str(federation.certs / "supernode-1.key"),
                "--node-config",
                "partition-id=1 num-partitions=2",
                "--max-retries",
                "2",
                "--max-wait-time",
                "20",
            ]
        ),
        log,
        federation.env,
    )
    assert wait_for_text(log, "CERTIFICATE_VERIFY_FAILED", 90), log.read_text()
    assert "SSL/TLS handshake error detected" in log.read_text()
    os.killpg(flower.pid, signal.SIGKILL)  # its own session: the lingering SuperExec too
    flower.wait(timeout=30)


def test_a_wrong_server_address_gives_up_with_a_countdown(federation: Federation) -> None:
    result = federation.run_in(
        "client-c",
        [
            str(BIN / "fl-client"),
            "--server",
            "10.77.0.99:9092",
            "--partition-id",
            "0",
            "--num-partitions",
            "2",
            "--root-certificates",
            str(federation.certs / certs.CA_CERT),
            "--connect-timeout",
            "6",
        ],
        timeout=60,
    )
    assert result.returncode == 2
    assert "fl-client: waiting for 10.77.0.99:9092" in result.stdout
    assert "giving up in" in result.stdout
    assert "fl-client: error: cannot reach 10.77.0.99:9092 after 6 s" in result.stderr


def test_replicas_enroll_their_own_keys_and_claim_distinct_partitions(
    federation: Federation,
) -> None:
    """Identical replicas (one compose service scaled): each makes its own key pair, drops
    the public half where fl-server enrolls it, claims a partition no live replica holds and
    is admitted; nothing was registered for them by hand."""
    claims = federation.work / "claims"
    logs = []
    for host in ("client-a", "client-b"):
        state = federation.work / f"replica-{host}"
        log = federation.work / f"replica-{host}.log"
        cmd = [
            str(BIN / "fl-client"), "--server", federation.server,
            "--partition-id", "auto", "--claims", str(claims), "--num-partitions", "2",
            "--state-dir", str(state), "--enroll", str(federation.work / "enroll"),
            "--root-certificates", str(federation.certs / certs.CA_CERT),
        ]  # fmt: skip
        federation.procs.start(
            f"replica {host}", federation.lan[host].command(cmd), log, federation.env
        )
        logs.append(log)
    for log in logs:
        assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
    claimed = [re.search(r"claimed partition (\d) of 2", log.read_text()) for log in logs]
    assert sorted(int(m.group(1)) for m in claimed if m) == [0, 1]
    for host, match in zip(("client-a", "client-b"), claimed, strict=True):
        folder = federation.work / f"replica-{host}" / f"partition-{match.group(1)}"
        assert oct((folder / "node.key").stat().st_mode & 0o777) == "0o600"
    assert len(list((federation.work / "enroll").glob("*.pub"))) == 2


def test_a_killed_fl_client_leaves_no_supernode_and_its_command_is_admitted_again(
    federation: Federation,
) -> None:
    """SIGKILL of fl-client (it cannot clean up): its SuperNode, in a session of its own,
    notices its parent is gone and leaves the federation, so nothing trains on unsupervised
    and the same command, run again at once, is admitted with the same key."""
    key = federation.certs / "supernode-3.key"
    proc, log = federation.client("client-b", 1, key=key)
    assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
    tree = descendants(proc.pid)  # the SuperNode and its ClientApp launcher
    assert len(tree) >= 2, tree
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 30  # ~3 s on a quiet machine
    while (left := [pid for pid in tree if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"orphans of the killed fl-client: {left}"
    again, again_log = federation.client("client-b", 1, key=key)
    assert wait_for_text(again_log, "SuperNode ID", 60), again_log.read_text()
    assert "error" not in again_log.read_text().lower()
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=30) == 143


LAUNCHER = b"fl_system.runtime.supernode.launcher"
SUPERLINK = b"fl-superlink"


def _child_running(pid: int, command: bytes) -> int:
    """The one descendant of `pid` whose command line contains `command`."""
    found = [p for p in descendants(pid) if command in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(found) == 1, (command, found)
    return found[0]


def _times_gone(proc: subprocess.Popen, pids: list[int], timeout: float) -> dict[int, float]:
    """When each of `pids` was first seen gone, watched until `proc` (their parent) exits."""
    gone: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"pid {proc.pid} still running after {timeout} s"
        gone.update({p: time.monotonic() for p in pids if p not in gone and not alive(p)})
        time.sleep(0.01)
    return {**{p: time.monotonic() for p in pids}, **gone}


def test_a_client_that_loses_the_server_gives_up_after_its_timeout(
    federation: Federation,
) -> None:
    """Runs last: stops the SuperLink. The client must not wait forever."""
    # a key no other test uses: a SuperNode stopped by the test before may not have left yet
    # (on a loaded machine its stop outlasts fl-client's grace, and it is let go only after
    # 2 missed heartbeats), and the SuperLink refuses a second SuperNode with its key
    key = federation.certs / "supernode-4.key"
    proc, log = federation.client("client-b", 1, "--connect-timeout", "6", key=key)
    assert wait_for_text(log, "SuperNode ID", 90), log.read_text()
    server = next(p for name, p in federation.procs.procs if name == "fl-server")
    launcher, superlink = (_child_running(server.pid, what) for what in (LAUNCHER, SUPERLINK))
    server.send_signal(signal.SIGTERM)
    gone = _times_gone(server, [launcher, superlink], timeout=60)
    assert server.wait() == 0  # fl-server stops its SuperLink and exits cleanly
    # and promptly: its launcher goes first (under a second on a quiet machine). Stopped after
    # the SuperLink, it retried the gone SuperLink for Flower's 10 s before it looked at its
    # signal.
    assert gone[launcher] <= gone[superlink], gone
    assert proc.wait(timeout=180) == 2
    assert "fl-client: error: lost the SuperLink and could not reach it again within " in (
        log.read_text()
    )
