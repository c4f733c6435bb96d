"""CPU that a federation burns while it waits for work: a SuperLink and N idle SuperNodes."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.process_tree import cpu_percent, tree
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, tool_env


@dataclass(frozen=True)
class IdleCpu:
    node_command: str
    nodes: int
    percent: float  # of one core, whole tree (SuperLink, SuperNodes and their helpers)
    processes: int
    settle: float
    window: float


def idle_cpu(
    node_command: str, nodes: int, *, settle: float, window: float, env: dict[str, str]
) -> IdleCpu:
    """Start the federation, let it settle (start-up imports), then measure CPU over `window`."""
    work = Path(tempfile.mkdtemp(prefix="idle-federation-"))
    env = tool_env({"FLWR_HOME": str(work / "flwr"), **env})
    procs = ProcessGroup()
    fleet, control = free_port(), free_port()
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink", "--insecure",
                "--fleet-api-address", f"127.0.0.1:{fleet}",
                "--control-api-address", f"127.0.0.1:{control}",
                "--port", str(free_port()),
                "--disable-runtime-dependency-installation",
            ],
            work / "superlink.log",
            env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", control):
            if time.monotonic() > deadline or procs.first_dead():
                raise RuntimeError(f"the SuperLink did not start; see {work / 'superlink.log'}")
            time.sleep(0.2)
        for pid in range(nodes):
            procs.start(
                f"supernode {pid}",
                [
                    node_command, "--insecure",
                    "--superlink", f"127.0.0.1:{fleet}",
                    "--node-config", f"partition-id={pid} num-partitions={nodes}",
                    "--port", str(free_port()),
                ],
                work / f"supernode-{pid}.log",
                env,
            )  # fmt: skip
        time.sleep(settle)
        if dead := procs.first_dead():
            raise RuntimeError(f"{dead[0]} exited with {dead[2]} while idle; see {work}")
        pids: set[int] = set()
        for _, proc in procs.procs:
            pids |= tree(proc.pid)
        percent = cpu_percent(pids, window)
    finally:
        procs.stop()
    shutil.rmtree(work, ignore_errors=True)
    return IdleCpu(node_command, nodes, percent, len(pids), settle, window)
