"""Nodes that come and go during a run, at moments drawn from a seed, and what it cost.

Each client host runs one fl-client (TLS, its own registered key, one partition). Events:
`supernode` SIGKILLs the node's fl-supernode (fl-client then exits), `fl-client` SIGKILLs
fl-client (its SuperNode must stop by itself), `host` SIGKILLs every process in the host's
namespace; each node is restarted with the same command after a drawn downtime. `before` is a
`supernode` kill just before the run is submitted, so the node is down at its handshake;
`leave` unregisters a node's key and registers a newcomer's key (made on that host) for the
same partition. A node *returns* when its SuperNode is admitted again ("SuperNode ID" in its
log); the rounds completed by then are noted, and metrics.csv says when it trained again.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fl_system.records.results import MetricsLog
from fl_system.runtime.launch.processes import descendants
from tests.e2e.federation import BIN, PORT, Federation

KINDS = ("supernode", "fl-client", "host")
ADMITTED = "SuperNode ID"  # Flower's line once the SuperLink activated the node


@dataclass
class Node:
    host: str
    partition: int
    key: Path
    proc: subprocess.Popen
    log: Path


@dataclass
class Event:
    kind: str  # before | supernode | fl-client | host | leave
    partition: int
    at_round: int  # fires once this many rounds are done (before: at submission)
    downtime: float  # seconds between the kill and the restart
    fired_at: float | None = None
    fired_rows: int | None = None
    restarted: Node | None = None
    returned_rows: int | None = None  # rounds done when the node was admitted again
    returned_at: float | None = None
    back_at: float | None = None  # when a row with its partition training appeared


@dataclass
class Plan:
    events: list[Event]
    num_rounds: int


def draw(seed: int, num_rounds: int, partitions: int, in_run: int) -> Plan:
    """`before`, then `in_run` kills spread over the run (every kind once before any twice),
    then `leave`; kill rounds at least 5 apart and 8 before the end."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(in_run)]
    rng.shuffle(kinds)
    span = (num_rounds - 10) / (in_run + 1)
    rounds = [int(3 + span * i + rng.uniform(0, span - 5)) for i in range(in_run + 1)]
    events = [Event("before", rng.randrange(partitions), 0, rng.uniform(0, 4))]
    events += [
        Event(kind, rng.randrange(partitions), at, rng.uniform(0, 4))
        for kind, at in zip(kinds, rounds, strict=False)
    ]
    events.append(Event("leave", rng.randrange(partitions), rounds[-1], rng.uniform(0, 4)))
    return Plan(events, num_rounds)


@dataclass
class Churn:
    """Runs a plan against a federation whose nodes it starts; `nodes` are the live ones."""

    federation: Federation
    hosts: list[str]
    num_partitions: int
    extra: tuple[str, ...] = ()  # more fl-client arguments for every node
    nodes: dict[int, Node] = field(default_factory=dict)
    every_node: list[Node] = field(default_factory=list)

    def start_nodes(self) -> None:
        for partition, host in enumerate(self.hosts):
            self.start(host, partition, self.federation.certs / f"supernode-{partition}.key")

    def start(self, host: str, partition: int, key: Path) -> Node:
        proc, log = self.federation.client(
            host, partition, *self.extra, key=key, num_partitions=self.num_partitions
        )
        node = Node(host, partition, key, proc, log)
        self.nodes[partition] = node
        self.every_node.append(node)
        return node

    def fire(self, event: Event, rows: int) -> None:
        """The event's kill (or departure); the restart comes `downtime` s later."""
        node = self.nodes[event.partition]
        event.fired_at, event.fired_rows = time.monotonic(), rows
        if event.kind in ("before", "supernode"):
            kill_supernode(node.proc)
        elif event.kind == "fl-client":
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)
        elif event.kind == "host":
            for pid in self._pids_in(node.host):
                signal_pid(pid, signal.SIGKILL)
            node.proc.wait(timeout=10)
        else:  # leave: the operator unregisters the node's key; a newcomer takes its place
            pub = node.key.with_suffix(".pub")
            self.federation.tool(
                "server", "fl-server", "unregister", str(pub), *self.federation.control
            )
            node.proc.wait(timeout=120)  # its fl-client is refused and exits

    def restart(self, event: Event) -> None:
        node = self.nodes[event.partition]
        key = node.key
        if event.kind == "leave":
            keys = self.federation.work / "newcomer-keys"
            self.federation.tool(node.host, "fl-certs", str(keys), "--node-key", "newcomer")
            pub = str(keys / "newcomer.pub")
            admitted = self.federation.tool(
                "server", "fl-server", "register", pub, *self.federation.control
            )
            assert re.search(r"newcomer\.pub: node \d+ registered", admitted.stdout)
            key = keys / "newcomer.key"
        event.restarted = self.start(node.host, node.partition, key)

    def follow(
        self, plan: Plan, run: subprocess.Popen, run_dir: Path, until: int | None = None
    ) -> None:
        """Fire, restart and watch for returns until the run ends (or `until` rounds are
        done)."""
        metrics = run_dir / "metrics.csv"
        while run.poll() is None:
            rows = MetricsLog(metrics).rows() if metrics.exists() else []
            if until is not None and len(rows) >= until:
                return
            for event in plan.events:
                # a partition whose node is not back yet from an earlier event waits its turn
                away = {e.partition for e in plan.events if e.fired_at and e.back_at is None}
                self._advance(event, rows, away)
            time.sleep(0.2)

    def _advance(self, event: Event, rows: list[dict[str, str]], away: set[int]) -> None:
        """The event's next step, when it is due: fire, restart, admitted, trained again."""
        now = time.monotonic()
        if event.fired_at is None:
            if len(rows) >= event.at_round and event.partition not in away:
                self.fire(event, len(rows))
        elif event.restarted is None:
            if now >= event.fired_at + event.downtime:
                self.restart(event)
        elif event.returned_at is None:
            if ADMITTED in event.restarted.log.read_text(errors="replace"):
                event.returned_at, event.returned_rows = now, len(rows)
        elif event.back_at is None and trained(rows[event.returned_rows or 0 :], event.partition):
            event.back_at = now

    def stop(self) -> None:
        """SIGTERM every live fl-client (its SuperNode leaves the federation cleanly)."""
        for node in self.nodes.values():
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            node.proc.wait(timeout=60)

    def _pids_in(self, host: str) -> list[int]:
        """Every process in `host`'s network namespace."""
        namespace = self.federation.lan[host].namespace
        listed = subprocess.run(
            ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True
        )
        return [int(pid) for pid in listed.stdout.split()]

    def left_in_namespaces(self) -> dict[str, list[str]]:
        """Processes still alive in each client host's namespace (none, once stopped)."""
        left = {}
        for host in self.hosts:
            left[host] = [_cmd(p) for p in self._pids_in(host)]
        return {host: cmds for host, cmds in left.items() if cmds}


@dataclass
class Outcome:
    """What a churned run left: fl-run's exit code and output, metrics.csv's rows, the
    server's join/leave/return lines, and processes left in the client hosts."""

    code: int
    output: str
    rows: list[dict[str, str]]
    lines: dict[str, list[int]]
    leftovers: dict[str, list[str]]
    claimant: tuple[int, str] | None  # the claimant of a held partition: exit code, output


def churned_run(
    federation: Federation,
    hosts: list[str],
    plan: Plan,
    run_dir: Path,
    *,
    claimant: bool,
    heartbeat: float | None = None,
) -> Outcome:
    """Start a node per host, take one down, submit the run, play the plan to the run's end
    (with `claimant`, a node claiming partition 0 comes after round 1), stop every node.
    `heartbeat`: the nodes' fl-client --heartbeat (None: fl-client's default)."""
    beat = () if heartbeat is None else ("--heartbeat", str(heartbeat))
    nodes = Churn(federation, hosts, num_partitions=len(hosts), extra=beat)
    nodes.start_nodes()
    for node in nodes.every_node:
        assert wait_for_admission(node, 90), node.log.read_text()
    out = run_dir.with_name(run_dir.name + "-fl-run.log")
    nodes.fire(plan.events[0], 0)  # the `before` event: down when the run handshakes it
    run = fl_run(federation, run_dir, plan.num_rounds, len(hosts), out)
    rival = None
    try:
        if claimant:  # turned away before any event can take partition 0's holder down
            nodes.follow(plan, run, run_dir, until=1)
            key = federation.certs / "supernode-4.key"
            rival = federation.client("server", 0, key=key, num_partitions=len(hosts))
            rival[0].wait(timeout=120)
        nodes.follow(plan, run, run_dir)
    finally:
        if run.poll() is None:
            run.kill()
        nodes.stop()
    run.wait()
    metrics = run_dir / "metrics.csv"
    return Outcome(
        code=run.returncode,
        output=out.read_text(errors="replace"),
        rows=MetricsLog(metrics).rows() if metrics.exists() else [],
        lines=log_lines(run_dir / "logs" / "serverapp.log"),
        leftovers=nodes.left_in_namespaces(),
        claimant=(rival[0].returncode, rival[1].read_text()) if rival else None,
    )


def wait_for_admission(node: Node, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while ADMITTED not in node.log.read_text(errors="replace"):
        if time.monotonic() > deadline or node.proc.poll() is not None:
            return False
        time.sleep(0.3)
    return True


def trained(rows: list[dict[str, str]], partition: int) -> bool:
    return any(row.get(f"weight_{partition}") for row in rows)


def first_round_back(rows: list[dict[str, str]], event: Event) -> int | None:
    """Rounds after its return until the partition trained again: 1 = the round under way
    when it returned, 2 = the next, ..."""
    assert event.returned_rows is not None
    for offset, row in enumerate(rows[event.returned_rows :], start=1):
        if row.get(f"weight_{event.partition}"):
            return offset
    return None


def rounds_without(rows: list[dict[str, str]], event: Event) -> int:
    """Rounds the partition missed from its event to its first round back."""
    start = event.fired_rows or 0
    missed = 0
    for row in rows[start:]:
        if row.get(f"weight_{event.partition}"):
            break
        missed += 1
    return missed


def log_lines(serverapp_log: Path) -> dict[str, list[int]]:
    """The server's join, return and leave lines: kind -> partitions, in order."""
    text = serverapp_log.read_text(errors="replace")
    return {
        "left": [int(p) for p in re.findall(r"node \d+ \(partition (\d+)\) left", text)],
        "returns": [int(p) for p in re.findall(r"node \d+ returns with partition (\d+)", text)],
        "joins": [int(p) for p in re.findall(r"node \d+ joins as partition (\d+)", text)],
    }


def said_of(serverapp_log: Path, partition: int) -> list[str]:
    """The server's lines naming `partition` (joins, drops, departures), for a failure."""
    text = serverapp_log.read_text(errors="replace") if serverapp_log.exists() else ""
    return [line for line in text.splitlines() if re.search(rf"partition {partition}\b", line)]


def fl_run(
    federation: Federation,
    run_dir: Path,
    num_rounds: int,
    partitions: int,
    log: Path,
    extra: Sequence[str] = (),
):
    """`fl-run runtime=remote` from the server's host, in the background."""
    server = federation.lan["server"].address
    overrides = [
        "runtime=remote",
        f"runtime.address={server}:{PORT}",
        f"runtime.root_certificates={federation.certs / 'ca.crt'}",
        f"runtime.credential={federation.certs / 'admin.key'}",
        *("dataset=digits", "model=mlp", "train.batch_size=64", f"num_rounds={num_rounds}"),
        f"num_clients={partitions}",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    with log.open("w") as out:
        return subprocess.Popen(
            federation.lan["server"].command([str(BIN / "fl-run"), *overrides]),
            env=federation.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def kill_supernode(client: subprocess.Popen, *, wait: bool = True) -> None:
    """SIGKILL the SuperNode of an fl-client, which reports its end and exits (`wait`: for
    that exit)."""
    supernode = next(p for p in descendants(client.pid) if "bin/fl-supernode" in _cmd(p))
    signal_pid(supernode, signal.SIGKILL)
    if wait:
        client.wait(timeout=60)


def signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
