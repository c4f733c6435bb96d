"""Child processes' logs: every line, in order, without terminal colour codes; restartable
processes (SuperNodes) started again when killed, not when failing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fl_system.runtime.launch.forks import ForkedChild, fork_session
from fl_system.runtime.launch.processes import ProcessGroup, alive, tool_env


def test_a_childs_log_keeps_its_lines_and_drops_colour_codes(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('\\x1b[92mINFO \\x1b[0m:      [fl_system] round 1/2 | acc 0.5000', flush=True)\n"
        "print('\\x1b[1;31mERROR\\x1b[0m: plain \\x1b[2K text', flush=True)\n"
        "sys.stdout.write('a last line without its end')\n"
    )
    log = tmp_path / "logs" / "child.log"
    procs = ProcessGroup()
    try:
        child = procs.start("child", [sys.executable, "-c", script], log, tool_env(), plain=True)
        child.wait(timeout=30)
        procs.drain(child)
    finally:
        procs.stop()
    assert log.read_text() == (
        "INFO :      [fl_system] round 1/2 | acc 0.5000\n"
        "ERROR: plain  text\n"
        "a last line without its end"
    )


NODE = """
import os, subprocess, sys, time
print("started", os.getpid(), flush=True)
# a child in a session of its own, as Flower's ClientApp processes are: it outlives a SIGKILL
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         start_new_session=True)
print("child", child.pid, flush=True)
time.sleep(120)
"""


def _wait_for(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_restartable_process_is_started_again_and_its_leftovers_ended(
    tmp_path: Path,
) -> None:
    log = tmp_path / "node.log"
    procs = ProcessGroup()
    try:
        first = procs.start("node 0", [sys.executable, "-c", NODE], log, tool_env(), restart=True)
        _wait_for(lambda: "child" in log.read_text())
        procs.watch()
        child = int(log.read_text().split("child ")[1].split()[0])
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        assert procs.restart_exited() == [("node 0", -signal.SIGKILL)]
        assert procs.first_dead() is None
        _wait_for(lambda: not alive(child))  # the killed node's child does not live on
        _wait_for(lambda: log.read_text().count("started") == 2)  # same log, appended
        ((name, second),) = procs.procs
        assert name == "node 0" and second.pid != first.pid and second.poll() is None
        assert procs.restart_exited() == []
        # Killed again at once (within the grace): a kill is not a failure, so again.
        _wait_for(lambda: "child" in log.read_text().split("started")[-1])
        procs.watch()  # as fl-run looks while it follows a run: the new child is known
        child = int(log.read_text().split("child ")[2].split()[0])
        os.kill(second.pid, signal.SIGKILL)
        second.wait(timeout=10)
        assert procs.restart_exited() == [("node 0", -signal.SIGKILL)]
        _wait_for(lambda: not alive(child))
        ((_, third),) = procs.procs
        assert third.pid != second.pid and third.poll() is None
        _wait_for(lambda: log.read_text().count("child") == 3)
        child = int(log.read_text().split("child ")[3].split()[0])
    finally:
        procs.stop()
    assert not alive(third.pid)
    _wait_for(lambda: not alive(child), timeout=5)  # in a session of its own, ended too


def test_a_node_killed_after_the_restart_pass_is_not_dead_but_started_again_next(
    tmp_path: Path,
) -> None:
    """fl-run's loop restarts what exited, then looks for what died for good: a node killed
    between the two (a second node killed while the first is being restarted) is restarted
    by the next pass, not reported dead (that ended a run of SecAgg+ nodes killed together)."""
    procs = ProcessGroup()
    try:
        sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
        node = procs.start("node 2", sleeper, tmp_path / "node.log", tool_env(), restart=True)
        assert procs.restart_exited() == []
        os.kill(node.pid, signal.SIGKILL)
        node.wait(timeout=10)
        assert procs.first_dead() is None
        assert procs.restart_exited() == [("node 2", -signal.SIGKILL)]
        ((_, again),) = procs.procs
        assert again.pid != node.pid and again.poll() is None
    finally:
        procs.stop()


def test_a_restarted_process_that_fails_at_once_stays_dead(tmp_path: Path) -> None:
    procs = ProcessGroup()
    try:
        crash = [sys.executable, "-c", "raise SystemExit(3)"]
        first = procs.start("node 1", crash, tmp_path / "node.log", tool_env(), restart=True)
        first.wait(timeout=10)
        assert procs.restart_exited() == [("node 1", 3)]  # it may have been killed: once more
        ((_, second),) = procs.procs
        second.wait(timeout=10)
        assert procs.restart_exited() == []  # exited again within the grace: failing
        dead = procs.first_dead()
        assert dead is not None and dead[0] == "node 1" and dead[2] == 3
    finally:
        procs.stop()


def test_what_a_killed_process_left_in_its_own_session_is_ended_at_stop(tmp_path: Path) -> None:
    """A SIGKILLed SuperLink's ServerApp lives on in a session of its own, reparented away:
    remembered by `watch` while its parent lived, it is ended with the group."""
    log = tmp_path / "superlink.log"
    procs = ProcessGroup()
    try:
        link = procs.start("superlink", [sys.executable, "-c", NODE], log, tool_env())
        _wait_for(lambda: "child" in log.read_text())
        procs.watch()
        child = int(log.read_text().split("child ")[1].split()[0])
        os.kill(link.pid, signal.SIGKILL)
        link.wait(timeout=10)
        assert alive(child)  # orphaned, not ended by its parent's death
    finally:
        procs.stop()
    _wait_for(lambda: not alive(child))


def test_a_forked_child_reports_its_exit_as_popen_does() -> None:
    """ForkedChild (the simulation engine forked from fl-run): an exit code, or minus the
    signal that ended it, and a wait that gives up when told."""
    exits = []
    for how in ("exit 3", "SIGKILL"):
        pid = os.fork()
        if pid == 0:
            if how == "SIGKILL":
                time.sleep(60)
            os._exit(3)
        child = ForkedChild(pid)
        if how == "SIGKILL":
            with pytest.raises(subprocess.TimeoutExpired):
                child.wait(timeout=0.1)
            assert child.poll() is None
            os.kill(pid, signal.SIGKILL)
        exits.append(child.wait(timeout=10))
        assert child.poll() == child.returncode == exits[-1]
    assert exits == [3, -signal.SIGKILL]


def test_a_forked_session_can_be_signalled_the_moment_the_fork_returns() -> None:
    """fork_session returns once the child leads its own process group: a stop right away
    (a run refused just after fl-run forked its engine) reaches it instead of missing it.
    The child's SIGINT and SIGTERM are at their default actions, not the parent's handlers."""
    for _ in range(20):
        pid = fork_session()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        os.killpg(pid, signal.SIGKILL)  # ProcessLookupError while the child had no group
        assert ForkedChild(pid).wait(timeout=10) == -signal.SIGKILL
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        pid = fork_session()
        if pid == 0:
            handlers = {signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            os._exit(0 if handlers == {signal.SIG_DFL} else 1)
        assert ForkedChild(pid).wait(timeout=10) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
