"""PollSchedule: how long a SuperNode sleeps between pulls (fast while active, backing off);
Wakeups: the socket a SuperLink on the same machine wakes it on."""

from __future__ import annotations

import math
import socket
import time
from itertools import pairwise
from pathlib import Path

import pytest

from fl_system.flower.wakeups import MESSAGE_STORED, node_socket
from fl_system.runtime.supernode import polling
from fl_system.runtime.supernode.polling import (
    ACTIVE_ENV,
    IDLE_ENV,
    REPLY_ENV,
    WINDOW_ENV,
    PollSchedule,
    Wakeups,
)

SCHEDULE = PollSchedule(active=0.1, idle=3.0, active_window=30.0)


def test_defaults_are_the_documented_ones() -> None:
    """The docstrings and README promise these numbers; a silent change would slow rounds."""
    assert PollSchedule() == PollSchedule(active=0.1, idle=3.0, active_window=30.0, reply=0.02)


@pytest.mark.parametrize("elapsed", [0.0, 0.001, 5.0, 29.999, 30.0])
def test_inside_the_active_window_the_node_polls_at_the_active_rate(elapsed: float) -> None:
    """A run sends its next message within seconds, so the node must answer fast."""
    assert SCHEDULE.wait(elapsed) == 0.1


# Past the window the wait doubles per pull: pulls at 0.1, 0.2, 0.4, 0.8 s ... so after
# `past` seconds the next wait is 0.2 for past in (0, 0.1], 0.4 in (0.1, 0.3], 0.8 in
# (0.3, 0.7], 1.6 in (0.7, 1.5], then 3.2 capped at idle=3.
@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [
        (30.05, 0.2),
        (30.2, 0.4),
        (30.5, 0.8),
        (31.0, 1.6),
        (31.6, 3.0),
        (32.0, 3.0),
        (1000.0, 3.0),
        (1e9, 3.0),
    ],
)
def test_after_the_window_the_wait_doubles_up_to_idle(elapsed: float, expected: float) -> None:
    """The backoff values computed by hand for active=0.1, idle=3, window=30."""
    assert SCHEDULE.wait(elapsed) == expected


@pytest.mark.parametrize(
    "schedule",
    [
        SCHEDULE,
        PollSchedule(active=0.25, idle=2.0, active_window=0.0),
        PollSchedule(active=0.3, idle=0.3, active_window=1.0),
        PollSchedule(active=0.05, idle=60.0, active_window=10.0),
    ],
)
def test_wait_is_monotone_and_bounded(schedule: PollSchedule) -> None:
    """Waiting longer without a message never makes the node poll faster, nor slower than idle."""
    times = [i * 0.01 for i in range(20_000)] + [1e3, 1e6]
    waits = [schedule.wait(t) for t in times]
    assert all(schedule.active <= w <= schedule.idle for w in waits)
    assert all(a <= b for a, b in pairwise(waits))
    assert waits[-1] == schedule.idle


def test_active_equal_to_idle_never_backs_off() -> None:
    """A fixed interval is a valid schedule (active == idle)."""
    fixed = PollSchedule(active=1.0, idle=1.0, active_window=0.0)
    assert {fixed.wait(t) for t in (0.0, 0.5, 10.0, 1e6)} == {1.0}


def test_zero_window_backs_off_right_after_a_message() -> None:
    """With no active window the first empty pull after a message already doubles."""
    schedule = PollSchedule(active=0.1, idle=3.0, active_window=0.0)
    assert schedule.wait(0.0) == 0.1
    assert schedule.wait(0.05) == 0.2


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"active": 0.0}, "'active'"),
        ({"active": -0.1}, "'active'"),
        ({"active": math.nan}, "'active'"),
        ({"idle": 0.0}, "'idle'"),
        ({"idle": 61.0}, "'idle'"),
        ({"idle": math.inf}, "'idle'"),
        ({"reply": 0.0}, "'reply'"),
        ({"reply": 100.0}, "'reply'"),
        ({"active": 5.0, "idle": 3.0}, "idle poll"),
        ({"active_window": -1.0}, "active[ _]window"),
    ],
)
def test_invalid_values_name_the_field(kwargs: dict[str, float], names: str) -> None:
    """An operator's typo must say which setting is wrong, not fail later in the node loop."""
    with pytest.raises(ValueError, match=names):
        PollSchedule(**kwargs)


def test_from_env_without_variables_gives_the_defaults() -> None:
    assert PollSchedule.from_env({}) == PollSchedule()


def test_from_env_reads_every_variable() -> None:
    """Each variable lands in its own field (a swapped pair would go unnoticed otherwise)."""
    env = {ACTIVE_ENV: "0.5", IDLE_ENV: "7", WINDOW_ENV: "12.5", REPLY_ENV: "0.01"}
    assert (ACTIVE_ENV, IDLE_ENV, WINDOW_ENV, REPLY_ENV) == (
        "FL_NODE_POLL_ACTIVE",
        "FL_NODE_POLL_IDLE",
        "FL_NODE_ACTIVE_WINDOW",
        "FL_NODE_REPLY_POLL",
    )
    assert PollSchedule.from_env(env) == PollSchedule(
        active=0.5, idle=7.0, active_window=12.5, reply=0.01
    )


def test_from_env_ignores_empty_values_and_reads_os_environ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty variable means unset (as in compose files); no argument means os.environ."""
    monkeypatch.setenv("FL_NODE_POLL_IDLE", "4")
    monkeypatch.setenv("FL_NODE_POLL_ACTIVE", "")
    monkeypatch.delenv("FL_NODE_ACTIVE_WINDOW", raising=False)
    monkeypatch.delenv("FL_NODE_REPLY_POLL", raising=False)
    assert PollSchedule.from_env() == PollSchedule(idle=4.0)


@pytest.mark.parametrize("var", [ACTIVE_ENV, IDLE_ENV, WINDOW_ENV, REPLY_ENV])
def test_from_env_non_number_names_the_variable(var: str) -> None:
    with pytest.raises(ValueError, match=f"{var} must be a number of seconds, got '3s'"):
        PollSchedule.from_env({var: "3s"})


def test_from_env_out_of_range_value_is_rejected() -> None:
    """A number that parses but is invalid still fails at start-up."""
    with pytest.raises(ValueError, match="'idle'"):
        PollSchedule.from_env({IDLE_ENV: "0"})


def test_a_node_listens_as_its_id_again_after_it_re_registered(tmp_path: Path) -> None:
    """A socket its previous process left is replaced; a new id leaves the old path."""
    (tmp_path / "7").write_text("left by the node's previous process")
    node = Wakeups(str(tmp_path))
    node.listen_as(7)
    first = node.sock
    node.listen_as(7)
    assert node.sock is first and Path(node_socket(tmp_path, 7)).is_socket()
    node.listen_as(8)
    assert not Path(node_socket(tmp_path, 7)).exists()
    assert Path(node_socket(tmp_path, 8)).is_socket()
    node.close()
    assert list(tmp_path.iterdir()) == [] and node.sock is None


def test_a_wake_up_ends_the_wait_and_a_drain_forgets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Wakeups(str(tmp_path))
    node.listen_as(3)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as superlink:
        superlink.sendto(MESSAGE_STORED, node_socket(tmp_path, 3))
        superlink.sendto(MESSAGE_STORED, node_socket(tmp_path, 3))
    waited = time.monotonic()
    node.wait(60.0)
    assert time.monotonic() - waited < 30.0  # woken, not timed out (any machine's speed)
    node.drain()
    selected: list[float] = []
    monkeypatch.setattr(polling.select, "select", lambda r, w, x, t: selected.append(t))
    node.wait(2.5)
    assert selected == [2.5]
    assert node.sock is not None
    with pytest.raises(BlockingIOError):
        node.sock.recv(64)
    node.close()
