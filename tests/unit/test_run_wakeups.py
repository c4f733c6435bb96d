"""The SuperLink wakes the ServerApp launcher when a run is created (a datagram on its
socket), so the launcher claims the run's ServerApp at once and otherwise asks only every
FALLBACK_POLL_SECONDS, where it asked five times a second."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME

from fl_system.flower import run_wakeups
from tests.unit.test_returning_nodes import Link, state_on


@pytest.fixture(autouse=True)
def unhooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's state classes as they were, once the test is over."""
    for cls in (SqlLinkState, InMemoryLinkState):
        monkeypatch.setattr(cls, "create_run", cls.create_run)


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_each_run_created_wakes_the_launcher_once_it_is_stored(where: str, tmp_path: Path) -> None:
    path = str(tmp_path / "launcher.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as launcher:
        launcher.bind(path)
        launcher.settimeout(5.0)
        run_wakeups.wake_on_new_runs(path)
        run_wakeups.wake_on_new_runs(path)  # installed once: one datagram per run
        db = FLWR_IN_MEMORY_DB_NAME if where == "memory" else str(tmp_path / "link.db")
        link = Link(state_on(db))
        assert launcher.recv(64) == run_wakeups.RUN_CREATED
        assert _server_app_task(link)  # stored before the wake-up
        launcher.setblocking(False)
        with pytest.raises(BlockingIOError):
            launcher.recv(64)


def test_a_run_is_created_when_no_launcher_listens(tmp_path: Path) -> None:
    run_wakeups.wake_on_new_runs(str(tmp_path / "nobody.sock"))
    link = Link(state_on(FLWR_IN_MEMORY_DB_NAME))
    assert _server_app_task(link)


def _server_app_task(link: Link) -> bool:
    """The run's ServerApp task is there, waiting for a launcher to claim it."""
    return [t.type for t in link.state.get_tasks(run_ids=[link.run_id])] == ["serverapp"]


def test_the_installed_flwr_has_what_is_wrapped() -> None:
    assert run_wakeups.problems() == []


WOKEN = """
import os, socket, sys, time
from fl_system.flower.run_wakeups import RUN_CREATED
from fl_system.runtime.launch.ports import free_port
from fl_system.runtime.supernode.launcher import FALLBACK_POLL_SECONDS, Launcher, bind_socket

path = sys.argv[1]
launcher = Launcher(bind_socket(path), os.getpid(), shared=True)
launcher.add_server(f"127.0.0.1:{free_port()}", None, None)
server, node = launcher.server.address, f"127.0.0.1:{free_port()}"
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as superlink:
    superlink.sendto(RUN_CREATED, path)
    print([n.address for n in launcher._wait_for_news()] == [server])
    superlink.sendto(f"{os.getpid()} {node}".encode(), path)
    print([n.address for n in launcher._wait_for_news()] == [node])
started = time.monotonic()
print([n.address for n in launcher._wait_for_news()] == [node, server])
print(time.monotonic() - started >= 0.9 * FALLBACK_POLL_SECONDS)
"""


def test_the_launcher_claims_server_apps_when_woken_and_every_fallback_poll(
    tmp_path: Path,
) -> None:
    """A run's wake-up names the SuperLink's Runtime API at once; a node's names only the
    node; with no wake-up the launcher waits FALLBACK_POLL_SECONDS, then looks at all (in a
    process of its own: a launcher takes over its process's signals)."""
    said = subprocess.run(
        [sys.executable, "-c", WOKEN, str(tmp_path / "launcher.sock")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert said.stdout.split() == ["True"] * 4, said.stdout + said.stderr
