"""The Flower forker: real forked `fl-supernode` and `fl-superlink` processes, their logs
and their exits."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fl_system.runtime.launch.flower_forker import FlowerForker, ForkedProcess
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, tool_env

pytestmark = pytest.mark.integration


@pytest.fixture
def forker(tmp_path: Path) -> Iterator[tuple[FlowerForker, ProcessGroup]]:
    procs = ProcessGroup()
    ours, theirs = socket.socketpair()
    with theirs:
        process = procs.start(
            "flower forker",
            [sys.executable, "-m", "fl_system.runtime.launch.flower_forker", str(theirs.fileno())],
            tmp_path / "forker.log",
            tool_env(),
            plain=True,
            pass_fds=(theirs.fileno(),),
        )
    yield FlowerForker(ours, process), procs
    procs.stop(grace=0)


def _node_args(port: int) -> list[str]:
    """A node whose SuperLink is not there: it keeps trying to connect."""
    return [
        "fl-supernode",
        "--insecure",
        "--superlink",
        f"127.0.0.1:{port}",
        "--node-config",
        "partition-id=0 num-partitions=1",
        "--port",
        str(free_port()),
    ]


def test_a_forked_node_is_fl_supernode_with_its_log_and_exit_code(
    forker: tuple[FlowerForker, ProcessGroup], tmp_path: Path
) -> None:
    nodes, _ = forker
    log = tmp_path / "node.log"
    node = nodes.spawn(["fl-supernode", "--isolation", "subprocess"], log, tool_env())
    assert node.wait(timeout=60) == 2  # fl-supernode's own refusal, as from the command line
    assert "fl-supernode chooses --isolation itself; leave it out" in log.read_text()


def test_a_killed_node_reports_the_signal_and_is_started_again(
    forker: tuple[FlowerForker, ProcessGroup], tmp_path: Path
) -> None:
    nodes, procs = forker
    log = tmp_path / "node.log"
    node = procs.start(
        "supernode 0",
        _node_args(free_port()),
        log,
        tool_env({"FLWR_HOME": str(tmp_path / "flwr")}),
        restart=True,
        spawner=nodes.spawn,
    )
    assert isinstance(node, ForkedProcess)
    deadline = time.monotonic() + 60
    while "Starting Flower SuperNode" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert os.getpgid(node.pid) == node.pid  # a session of its own: stopped as a group
    os.kill(node.pid, signal.SIGKILL)
    assert node.wait(timeout=10) == -signal.SIGKILL
    assert procs.restart_exited() == [("supernode 0", -signal.SIGKILL)]
    ((_, again),) = procs.procs[1:]
    assert again.pid != node.pid and again.poll() is None
    procs.stop(grace=5)
    assert again.poll() is not None  # ended with the group, reported by the forker


def test_a_forked_superlink_serves_its_ports(
    forker: tuple[FlowerForker, ProcessGroup], tmp_path: Path
) -> None:
    nodes, procs = forker
    port = free_port()  # Fleet, Control and Runtime APIs (Flower 1.42)
    link = procs.start(
        "superlink",
        [
            "fl-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(port),
            "--isolation", "process", "--disable-runtime-dependency-installation",
        ],
        tmp_path / "superlink.log",
        tool_env({"FLWR_HOME": str(tmp_path / "flwr")}),
        spawner=nodes.spawn,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        assert link.poll() is None and time.monotonic() < deadline, (
            tmp_path / "superlink.log"
        ).read_text()
        time.sleep(0.1)
    assert "Starting Flower SuperLink" in (tmp_path / "superlink.log").read_text()


def test_the_forker_refuses_other_commands(forker: tuple[FlowerForker, ProcessGroup]) -> None:
    nodes, _ = forker
    with pytest.raises(ValueError, match="starts fl-superlink and fl-supernode only"):
        nodes.spawn(["flwr", "run"], Path(os.devnull), tool_env())


def test_when_fl_run_dies_the_forker_ends_what_it_started(
    forker: tuple[FlowerForker, ProcessGroup], tmp_path: Path
) -> None:
    """fl-run killed (its end of the socket closes): nobody else would stop the processes."""
    nodes, procs = forker
    log = tmp_path / "node.log"
    node = nodes.spawn(_node_args(free_port()), log, tool_env())
    deadline = time.monotonic() + 60
    while not log.exists() or "Starting Flower SuperNode" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    nodes.control.shutdown(socket.SHUT_RDWR)  # what fl-run dying does to its end
    assert procs.procs[0][1].wait(timeout=15) == 0  # the forker, once its children ended
    assert node.wait(timeout=1) is not None
    assert not Path(f"/proc/{node.pid}").exists()
