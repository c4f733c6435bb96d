"""fl-supernode's failure handling: a dead launcher, a hard-killed ClientApp, a raising one.

Each test starts its own federation (a SuperLink and two fl-supernodes) because it breaks a
node on purpose.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fl_system.data.node_dir import TRAIN_FILE
from fl_system.records.results import MetricsLog
from fl_system.runtime.launch.processes import alive, descendants
from tests.integration.conftest import QUICK, HandStartedFederation, start_fl_run

pytestmark = pytest.mark.integration

LAUNCHER_MODULE = b"fl_system.runtime.supernode.launcher"
REPLY_BOUND = 20.0  # seconds from a ClientApp's death to its node's error reply
SLOW = "clients.slow.ids=[0,1] clients.slow.seconds_per_step={}"  # sleeps, not computes


# ----- helpers --------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) from /proc/<pid>/stat, or None once the pid is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (zombies included)."""
    return sorted(p for p in descendants(pid) if (s := _stat(p)) is not None and s[1] == pid)


def _zombies(pid: int) -> set[int]:
    return {p for p in _children(pid) if (s := _stat(p)) is not None and s[0] == "Z"}


def _assert_reaped(pid: int) -> None:
    """Every child of `pid` that has exited now is reaped soon. A child that has just ended
    is a zombie until its parent's next look (milliseconds, more on a loaded machine); one
    never reaped stays one."""
    seen = _zombies(pid)
    _wait_for(f"zombies {sorted(seen)} reaped", lambda: not seen & _zombies(pid), timeout=10)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _wait_for(what: str, check: Callable[[], Any], timeout: float, poll: float = 0.1) -> Any:
    """check()'s first truthy value within `timeout` seconds, else fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        if value := check():
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(poll)


def _launcher_of(node: subprocess.Popen) -> int:
    """The node's ClientApp launcher: its child running fl_system.runtime.supernode.launcher (forked
    ClientApps share that command line, but they are the launcher's children, not the node's)."""

    def find() -> int | None:
        found = [p for p in _children(node.pid) if LAUNCHER_MODULE in _cmdline(p)]
        assert len(found) <= 1, found
        return found[0] if found else None

    return _wait_for("the node's launcher", find, timeout=30)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    return MetricsLog(path).rows() if path.exists() else []


def _round_1_clientapps(launcher: int, run_dir: Path, timeout: float = 120) -> set[int]:
    """Every child the launcher forked before round 1's row was written. Each look at the
    children comes before the look at metrics.csv, so round 2's ClientApp (forked after the
    row) is never among them, however soon it starts."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        children = _children(launcher)
        if _rows(run_dir):
            return seen
        seen.update(children)
        assert time.monotonic() < deadline, f"a first round: not within {timeout} s"
        time.sleep(0.02)


class Submitted:
    """`fl-run runtime=remote` in the background, its output in files."""

    def __init__(self, root: Path, args: list[str], env: dict[str, str]) -> None:
        self.err = root / "fl-run.err"
        with open(root / "fl-run.out", "wb") as out, open(self.err, "wb") as err:
            self.proc = start_fl_run(args, env, stdout=out, stderr=err)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"fl-run still running after {timeout} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.err.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Federation(HandStartedFederation):
    """A hand-started federation that also submits runs (in the background) to itself."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        super().__init__(root, env)
        self.run_env = env

    def submit(self, run_dir: Path, *args: str) -> Submitted:
        return Submitted(
            run_dir.parent,
            [*QUICK, *args, *self.remote_args(), f"hydra.run.dir={run_dir}"],
            self.run_env,
        )


@pytest.fixture
def federation(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[Federation]:
    """A SuperLink alone; each test starts its own (possibly broken) fl-supernodes."""
    env = {
        **cli_env,
        "FL_STATE_DIR": str(tmp_path / "node-state"),
        "FLWR_HOME": str(tmp_path / "flwr-home"),
    }
    federation = Federation(tmp_path, env)
    try:
        federation.start_superlink()
        yield federation
    finally:
        federation.stop()


# ----- a. the launcher dies -------------------------------------------------------------------
def test_a_killed_launcher_stops_its_node_and_the_run_goes_on(
    federation: Federation, tmp_path: Path
) -> None:
    """Without its launcher a node would take messages it can never answer; it must leave,
    so that the SuperLink reports it unavailable and the run continues with the others."""
    node = federation.start_supernode(0, 2, "supernode-0.log")
    federation.start_supernode(1, 2, "supernode-1.log")
    launcher = _launcher_of(node)
    run_dir = tmp_path / "run"
    # Both nodes sleep 0.1 s per local step (~12 a round): rounds of a second or two, so the
    # kill lands mid-run, with the cores left to the processes under test.
    run = federation.submit(run_dir, "num_rounds=6", *SLOW.format(0.1).split())
    try:
        _wait_for("a first round", lambda: _rows(run_dir), timeout=120)
        rounds_before = len(_rows(run_dir))
        tree = descendants(node.pid) | {node.pid}
        os.kill(launcher, signal.SIGKILL)

        assert node.wait(timeout=30) == 1  # exits by itself, with the launcher's exit code
        log = (tmp_path / "supernode-0.log").read_text()
        said = f"the ClientApp launcher (pid {launcher}) ended with signal SIGKILL"
        assert said in log, log[-3000:]

        assert run.wait(timeout=150) == 0, run.tail()
    finally:
        run.kill()
    rows = _rows(run_dir)
    assert [r["round"] for r in rows] == [str(r) for r in range(1, 7)]
    assert rounds_before < 6, "the run ended before the launcher was killed"
    # The round in flight loses node 0 ("node unavailable": a failure) unless node 0 had
    # replied already; every later round runs with node 1 alone.
    after = rows[rounds_before:]
    assert any(r["participants"] == "1" or int(r["failures"]) >= 1 for r in after), after
    assert all(r["participants"] == "1" for r in after[1:]), after
    _wait_for("every process of node 0 gone", lambda: not any(map(alive, tree)), timeout=30)


# ----- b. a ClientApp killed hard -------------------------------------------------------------
def test_a_hard_killed_clientapp_is_reported_and_reaped(
    federation: Federation, tmp_path: Path
) -> None:
    """A ClientApp that dies by a signal sends no reply: the launcher must say so, reap it,
    have its node send the error reply at once, and keep serving; the round goes on without
    that node's update and the node serves every later round."""
    node = federation.start_supernode(0, 2, "supernode-0.log")
    federation.start_supernode(1, 2, "supernode-1.log")
    launcher = _launcher_of(node)
    run_dir = tmp_path / "run"
    # Slow clients (0.25 s per local step, ~3 s a task), so that a ClientApp lives long enough
    # to be hit.
    run = federation.submit(run_dir, "num_rounds=4", "round_timeout=20", *SLOW.format(0.25).split())
    try:
        round_1 = _round_1_clientapps(launcher, run_dir)
        child = _wait_for(
            "a round-2 ClientApp",
            lambda: next((p for p in _children(launcher) if p not in round_1), None),
            timeout=30,
            poll=0.02,
        )
        time.sleep(0.5)  # into its task (seconds long, asleep after its steps)
        assert len(_rows(run_dir)) == 1, "the round ended before its ClientApp could be killed"
        log_path = tmp_path / "supernode-0.log"
        logged = len(log_path.read_text())
        os.kill(child, signal.SIGKILL)
        killed = time.monotonic()
        error = re.compile(
            rf"ERROR: ClientApp task \d+ \(pid {child}\) ended after [\d.]+ s with signal "
            r"SIGKILL: it sent no reply; its node sends the server an error reply now"
        )
        found = _wait_for(
            "the launcher's error line", lambda: error.search(log_path.read_text()), 20
        )
        # The node answers for its dead ClientApp at once (Flower: when the task's token
        # expires, ~60 s), so it is free for the next round's task. A second or two on a
        # quiet machine; a third of Flower's wait leaves room for a loaded one.
        _wait_for(
            "the node's error reply",
            lambda: "Sending: train message" in log_path.read_text()[logged:],
            timeout=REPLY_BOUND,
            poll=0.05,
        )
        replied = time.monotonic() - killed
        assert replied < REPLY_BOUND, replied
        _assert_reaped(launcher)
        assert node.poll() is None  # a lost ClientApp does not stop the node

        assert run.wait(timeout=150) == 0, run.tail()
        # The launcher kept serving: tasks after the killed one ended normally.
        served = re.compile(r"\] ClientApp task \d+ \(pid \d+\) ended after [\d.]+ s$", re.M)
        _wait_for(
            "a ClientApp task served after the kill",
            lambda: served.search(log_path.read_text(), found.end()),
            timeout=30,
        )
        _assert_reaped(launcher)
        assert node.poll() is None
    finally:
        run.kill()
    rows = _rows(run_dir)
    assert [r["round"] for r in rows] == [str(r) for r in range(1, 5)]
    assert rows[1]["participants"] == "1" and rows[1]["failures"] == "1"
    assert all(r["participants"] == "2" for r in rows[2:]), rows  # node 0 served them


# ----- c. a ClientApp that raises -------------------------------------------------------------
def test_a_raising_clientapp_fails_its_round_at_once(
    federation: Federation, tmp_path: Path
) -> None:
    """An exception in the ClientApp becomes an error reply right away, not after the
    SuperNode's heartbeat expires (about 60 s): the round records the failure and goes on."""
    bad = tmp_path / "bad-data"
    bad.mkdir()
    (bad / TRAIN_FILE).write_bytes(b"this is not a numpy archive")
    federation.start_supernode(0, 2, "supernode-0.log")
    node = federation.start_supernode(1, 2, "supernode-1.log", node_config=f'data-dir="{bad}"')
    launcher = _launcher_of(node)
    run_dir = tmp_path / "run"
    run = federation.submit(run_dir, "num_rounds=2")
    try:
        assert run.wait(timeout=150) == 0, run.tail()
    finally:
        run.kill()
    rows = _rows(run_dir)
    assert [r["round"] for r in rows] == ["1", "2"]
    assert all(r["participants"] == "1" and r["failures"] == "1" for r in rows), rows
    # Round 2 is only the failing exchange: seconds, far below the 60 s heartbeat expiry.
    assert float(rows[1]["wall_seconds"]) - float(rows[0]["wall_seconds"]) < 20
    # The server names the failing node and the ClientApp's own error.
    node_id = re.search(r"SuperNode ID: (\d+)", (tmp_path / "supernode-1.log").read_text())
    assert node_id is not None
    server_log = (run_dir / "logs" / "serverapp.log").read_text()
    dropped = re.findall(
        rf"round (\d): node {node_id.group(1)} \(partition \d+\) dropped: (.*)", server_log
    )
    assert [r for r, _ in dropped] == ["1", "2"], server_log[-3000:]
    assert all("DataError" in why and str(bad / TRAIN_FILE) in why for _, why in dropped)
    time.sleep(1)
    _assert_reaped(launcher)
    assert node.poll() is None  # a failing ClientApp does not stop its node
