"""Runs the real `fl-run` CLI as a subprocess, as a user would."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_system.launch.processes import ProcessGroup, descendants, free_port, port_open, tool_env

FL_RUN = shutil.which("fl-run", path=str(Path(sys.executable).parent)) or "fl-run"

# Small and fast: 8x8 digits, an MLP, two clients.
QUICK = ["dataset=digits", "model=mlp", "num_clients=2", "train.batch_size=64"]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """A private partition cache per test, so tests never share node state."""
    env = dict(os.environ)
    env["FL_CACHE_DIR"] = str(tmp_path / "node-cache")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def run_cli(
    args: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FL_RUN, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Interrupted:
    returncode: int
    stderr: str
    process_tree: set[int]  # every descendant alive just before the signal


def interrupt_when(
    args: list[str],
    env: dict[str, str],
    ready: Callable[[], bool],
    sig: int,
    timeout: float = 300,
) -> Interrupted:
    """Start fl-run, wait until `ready()`, record its process tree, send `sig`, wait for exit."""
    proc = subprocess.Popen(
        [FL_RUN, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, f"not ready within {timeout} s"
            time.sleep(0.2)
        tree = descendants(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(1)  # let the kernel reap what was killed
    return Interrupted(proc.returncode, err, tree)


class HandStartedFederation:
    """A SuperLink and SuperNodes started the way a user starts them on separate machines."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = tool_env(env)
        self.procs = ProcessGroup()
        self.fleet, self.control = free_port(), free_port()
        self.nodes: dict[int, subprocess.Popen] = {}

    def start_superlink(self) -> None:
        self.procs.start(
            "superlink",
            [
                "flower-superlink", "--insecure",
                "--fleet-api-address", f"127.0.0.1:{self.fleet}",
                "--control-api-address", f"127.0.0.1:{self.control}",
                "--port", str(free_port()),
                "--disable-runtime-dependency-installation",
            ],
            self.root / "superlink.log",
            self.env,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", self.control):
            assert self.procs.first_dead() is None, "the SuperLink exited during start-up"
            assert time.monotonic() < deadline, "SuperLink not up after 60 s"
            time.sleep(0.2)

    def start_supernode(self, partition_id: int, num_partitions: int, log_name: str) -> None:
        self.nodes[partition_id] = self.procs.start(
            f"supernode {partition_id}",
            [
                "flower-supernode", "--insecure",
                "--superlink", f"127.0.0.1:{self.fleet}",
                "--node-config", f"partition-id={partition_id} num-partitions={num_partitions}",
                "--port", str(free_port()),
            ],
            self.root / log_name,
            self.env,
        )  # fmt: skip

    def stop_supernode(self, partition_id: int) -> None:
        proc = self.nodes.pop(partition_id)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        self.procs.procs = [(n, p) for n, p in self.procs.procs if p is not proc]

    def remote_args(self) -> list[str]:
        return [
            "runtime=remote",
            f"runtime.address=127.0.0.1:{self.control}",
            "runtime.insecure=true",
        ]

    def stop(self) -> None:
        self.procs.stop()
