"""An idle deployment, as users start one: `fl-server` and N `fl-client` nodes with no run,
and the CPU and memory each of its processes costs once every node is connected."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.fl_run import Code
from benchmarks.harness.process_tree import cpu_seconds, pss_bytes, tree
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup

ACTIVATED = "[Fleet.ActivateNode] Activated node_id="  # the SuperLink's line per node joined
CONNECT_SECONDS = 600  # for every node to join: 30 nodes start torch on a slow machine
# Which process a command line is, by what it runs (first match wins)
ROLES = (
    ("fl-superlink", "superlink"),
    ("--serverapp-api-address", "server launcher"),
    ("fl_system.deploy.server", "fl-server"),
    ("--wake-fd", "node launcher"),
    ("fl-supernode", "supernode"),
    ("fl_system.deploy.client", "fl-client"),
)
SERVER_ROLES = ("superlink", "server launcher", "fl-server")
NODE_ROLES = ("supernode", "node launcher", "fl-client")


@dataclass(frozen=True)
class IdleCost:
    """What one idle deployment cost over the measured window."""

    code: str  # which code ran (Code.label)
    nodes: int
    percent: dict[str, float]  # role -> % of one core, summed over its processes
    processes: dict[str, int]  # role -> how many
    node_pss: float  # bytes, a node's whole tree (fl-client, SuperNode, launcher), mean
    server_pss: float  # bytes, fl-server's whole tree
    connect: float  # seconds from fl-server's start until every node had joined
    window: float

    def per_node(self, role: str | None = None) -> float:
        """% of one core an idle node costs (one of its roles, or all of them)."""
        roles = NODE_ROLES if role is None else (role,)
        return sum(self.percent.get(r, 0.0) for r in roles) / self.nodes


def role(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    line = " ".join(a.decode(errors="replace") for a in argv)
    return next((name for needle, name in ROLES if needle in line), "other")


def by_role(pids: Iterable[int]) -> dict[str, set[int]]:
    roles: dict[str, set[int]] = {}
    for pid in pids:
        roles.setdefault(role(pid), set()).add(pid)
    return roles


def activated(log: Path) -> int:
    """The nodes the SuperLink has said joined (fl-server echoes its log)."""
    try:
        return log.read_text(errors="replace").count(ACTIVATED)
    except OSError:
        return 0


def idle_cost(code: Code, nodes: int, *, settle: float, window: float) -> IdleCost:
    """Start fl-server and `nodes` fl-client nodes from `code`, wait until every node has
    joined, let the start-up settle, then measure each process's CPU over `window`."""
    work = Path(tempfile.mkdtemp(prefix="idle-cost-"))
    env = code.env(work / "cache")
    env["FLWR_HOME"] = str(work / "flwr")
    python = code.interpreter  # a worktree's code through PYTHONPATH (Code.env)
    procs = ProcessGroup()
    port = free_port()
    started = time.monotonic()
    try:
        server_log = work / "fl-server.log"
        procs.start(
            "fl-server",
            [
                python, "-m", "fl_system.deploy.server", "--insecure",
                "--address", f"127.0.0.1:{port}", "--state-dir", str(work / "server"),
            ],
            server_log,
            env,
        )  # fmt: skip
        _wait(lambda: port_open("127.0.0.1", port), procs, "fl-server to serve", server_log)
        for i in range(nodes):
            procs.start(
                f"fl-client {i}",
                [
                    python, "-m", "fl_system.deploy.client", "--insecure",
                    "--server", f"127.0.0.1:{port}",
                    "--partition-id", str(i), "--num-partitions", str(nodes),
                    "--state-dir", str(work / f"client-{i}"),
                ],
                work / f"fl-client-{i}.log",
                env,
            )  # fmt: skip
        _wait(lambda: activated(server_log) >= nodes, procs, f"{nodes} nodes to join", server_log)
        connect = time.monotonic() - started
        time.sleep(settle)
        server, *clients = (tree(proc.pid) for _, proc in procs.procs)
        roles = by_role(set().union(server, *clients))
        before = {name: cpu_seconds(pids) for name, pids in roles.items()}
        time.sleep(window)
        percent = {
            name: 100 * (cpu_seconds(pids) - before[name]) / window for name, pids in roles.items()
        }
        if dead := procs.first_dead():
            raise RuntimeError(f"{dead[0]} exited with {dead[2]} while idle; see {work}")
        node_pss = sum(pss_bytes(pids) for pids in clients) / nodes
        cost = IdleCost(
            code.label,
            nodes,
            percent,
            {name: len(pids) for name, pids in roles.items()},
            node_pss,
            pss_bytes(server),
            connect,
            window,
        )
    finally:
        procs.stop()
    shutil.rmtree(work, ignore_errors=True)
    return cost


def _wait(done: Callable[[], bool], procs: ProcessGroup, what: str, log: Path) -> None:
    deadline = time.monotonic() + CONNECT_SECONDS
    while not done():
        if dead := procs.first_dead():
            raise RuntimeError(f"{dead[0]} exited with {dead[2]} waiting for {what}; see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up after {CONNECT_SECONDS} s waiting for {what}; see {log}")
        time.sleep(0.5)
