"""The SuperLink wakes the ServerApp launcher when a run is created and a SuperNode on its
machine when a message for it is stored (a datagram on their sockets), so each acts at once
and otherwise asks only every FALLBACK_POLL_SECONDS, where the launcher asked five times a
second and a node ten."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME
from flwr.superlink.federation.noop_federation_manager import NOOP_FEDERATION_ID

from fl_system.flower import wakeups
from tests.unit.test_returning_nodes import Link, state_on


@pytest.fixture(autouse=True)
def unhooked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's state classes as they were, once the test is over."""
    for cls in (SqlLinkState, InMemoryLinkState):
        for method in wakeups.WRAPPED:
            monkeypatch.setattr(cls, method, getattr(cls, method))


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_each_run_created_wakes_the_launcher_once_it_is_stored(where: str, tmp_path: Path) -> None:
    path = str(tmp_path / "launcher.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as launcher:
        launcher.bind(path)
        launcher.settimeout(5.0)
        wakeups.wake_on_new_runs(path)
        wakeups.wake_on_new_runs(path)  # installed once: one datagram per run
        db = FLWR_IN_MEMORY_DB_NAME if where == "memory" else str(tmp_path / "link.db")
        link = Link(state_on(db))
        assert launcher.recv(64) == wakeups.RUN_CREATED
        assert _server_app_task(link)  # stored before the wake-up
        launcher.setblocking(False)
        with pytest.raises(BlockingIOError):
            launcher.recv(64)


def test_a_run_created_as_the_control_api_creates_it_wakes_the_launcher(tmp_path: Path) -> None:
    """Flower's StartRun passes its last arguments by keyword."""
    path = str(tmp_path / "launcher.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as launcher:
        launcher.bind(path)
        launcher.settimeout(5.0)
        wakeups.wake_on_new_runs(path)
        state = state_on(FLWR_IN_MEMORY_DB_NAME)
        args = (None, None, None, {}, NOOP_FEDERATION_ID, None, None, "serverapp")
        assert state.create_run(*args, user_prompt=None, series_id=None, connector_ids=())
        assert launcher.recv(64) == wakeups.RUN_CREATED


@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_a_message_stored_wakes_its_node_only_and_a_reply_wakes_nobody(
    where: str, tmp_path: Path
) -> None:
    db = FLWR_IN_MEMORY_DB_NAME if where == "memory" else str(tmp_path / "link.db")
    link = Link(state_on(db))
    to, other = link.node(), link.node()
    wakeups.wake_nodes_on_messages(str(tmp_path))
    wakeups.wake_nodes_on_messages(str(tmp_path))  # installed once: one datagram per message
    with _listening(tmp_path, to) as node, _listening(tmp_path, other) as elsewhere:
        ins = link.send(to, pulled=False)
        assert node.recv(64) == wakeups.MESSAGE_STORED
        assert [m.metadata.message_id for m in link.state.get_message_ins(to, None)] == [
            ins.metadata.message_id
        ]  # stored, committed, before the wake-up
        link.reply(ins, 1.0, uploaded=True)
        for sock in (node, elsewhere):
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(64)


def test_a_message_is_stored_when_its_node_does_not_listen(tmp_path: Path) -> None:
    wakeups.wake_nodes_on_messages(str(tmp_path / "nobody"))
    link = Link(state_on(FLWR_IN_MEMORY_DB_NAME))
    to = link.node()
    link.send(to)  # pulled


@contextlib.contextmanager
def _listening(directory: Path, node_id: int) -> Iterator[socket.socket]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(wakeups.node_socket(directory, node_id))
        sock.settimeout(5.0)
        yield sock


def test_a_run_is_created_when_no_launcher_listens(tmp_path: Path) -> None:
    wakeups.wake_on_new_runs(str(tmp_path / "nobody.sock"))
    link = Link(state_on(FLWR_IN_MEMORY_DB_NAME))
    assert _server_app_task(link)


def _server_app_task(link: Link) -> bool:
    """The run's ServerApp task is there, waiting for a launcher to claim it."""
    return [t.type for t in link.state.get_tasks(run_ids=[link.run_id])] == ["serverapp"]


def test_the_installed_flwr_has_what_is_wrapped() -> None:
    assert wakeups.problems() == []


WOKEN = """
import os, socket, sys, time
from fl_system.flower.wakeups import RUN_CREATED
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
