"""The ClientApp launcher's two ways to run (one node's pipe, or every local node's), and
its end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fl_system.runtime.launch.processes import alive
from fl_system.runtime.supernode.launcher import parse_args


def test_one_node_takes_its_address_pipe_and_pid() -> None:
    args = parse_args(
        ["--runtime-api-address", "127.0.0.1:9094", "--wake-fd", "5", "--node-pid", "7"]
    )
    assert (args.runtime_api_address, args.wake_fd, args.node_pid) == ("127.0.0.1:9094", 5, 7)
    assert args.socket is None


def test_a_shared_launcher_takes_its_socket_parent_and_superlink() -> None:
    args = parse_args(
        ["--socket", "/tmp/l.sock", "--parent-pid", "9", "--serverapp-api-address", "h:1"]
    )
    assert (args.socket, args.parent_pid, args.serverapp_api_address) == ("/tmp/l.sock", 9, "h:1")


@pytest.mark.parametrize(
    "argv",
    [
        [],  # neither way
        ["--runtime-api-address", "a:1", "--wake-fd", "5"],  # no node pid
        ["--socket", "/tmp/l.sock"],  # no parent pid
        ["--socket", "/tmp/l.sock", "--parent-pid", "9", "--wake-fd", "5"],  # both ways
        ["--runtime-api-address", "a:1", "--wake-fd", "5", "--node-pid", "7",
         "--serverapp-api-address", "h:1"],  # ServerApps only for the shared launcher
    ],
)  # fmt: skip
def test_a_mixed_or_partial_command_line_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(argv)
    assert stopped.value.code == 2
    assert "--socket" in capsys.readouterr().err


STUCK_CHILD = """
import os, sys, time
from fl_system.runtime.supernode.launcher import Launcher

read_end, write_end = os.pipe()
launcher = Launcher(read_end, os.getpid(), shared=False)
pid = os.fork()
if pid == 0:  # a child stuck for good (a lock its fork copied held): only SIGKILL ends it
    os.close(write_end)
    while True:
        time.sleep(1)
launcher.children[pid] = (None, None, time.monotonic())
print(pid, flush=True)
os.close(write_end)  # its node closes the pipe: the launcher stops
launcher.serve()
"""


def test_a_stopping_launcher_ends_the_children_it_forked() -> None:
    """Their node is gone, so no reply of theirs can arrive; one stuck would live forever."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", STUCK_CHILD], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    try:
        assert launcher.wait(timeout=60) == 0
        assert not alive(child)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


NODE_GONE_MID_CALL = """
import os, subprocess, sys, time
from fl_system.flower import flwr_tasks
from fl_system.runtime.launch.ports import free_port
from fl_system.runtime.supernode.launcher import Launcher

flwr_tasks.CLAIM_RETRY_SECONDS = 1.0
read_end, write_end = os.pipe()  # the node never writes: the fallback poll claims
node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
launcher = Launcher(read_end, node.pid, shared=False)
launcher.add_node(f"127.0.0.1:{free_port()}", node.pid)  # a Runtime API nobody serves
started = time.monotonic()
launcher.serve()
print(f"{time.monotonic() - started:.1f}", flush=True)
"""


def test_a_launcher_whose_node_vanished_mid_call_stops() -> None:
    """Flower's HTTP client retries for ever; the launcher's claims give up after
    CLAIM_RETRY_SECONDS, so it notices its node is gone and stops."""
    done = subprocess.run(
        [sys.executable, "-c", NODE_GONE_MID_CALL], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 10
    assert "ERROR: claiming tasks from 127.0.0.1:" in done.stderr


NODE_STOPPED_AT_ONCE = """
from fl_system.runtime.supernode.node import LauncherWatch

watch = LauncherWatch("127.0.0.1:9")
watch.stop()  # before the launcher could have imported what it preloads
print(watch.proc.returncode, flush=True)
"""


def test_a_node_stopped_while_its_launcher_imports_does_not_wait_for_the_imports() -> None:
    """A node stopped in its first seconds (its fl-client killed just after admission) stops
    its launcher at once, not after the launcher's preload (seconds; more under load)."""
    done = subprocess.run(
        [sys.executable, "-c", NODE_STOPPED_AT_ONCE], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) in (0, -signal.SIGTERM), done.stderr[-2000:]
    assert "ready: preloaded" not in done.stderr
