"""CPU slots: the suite runs one more xdist worker than it lets compute at once.

The e2e tests (network-namespace hosts, SuperNodes killed and restarted) spend most of their
minutes waiting on heartbeats and restarts, and take as long beside other tests as alone.
Every other test computes, so with `-n N` at most N - 1 of them run at a time, each holding a
slot (a lock file shared by the workers) from its setup to its teardown; the e2e tests hold
none and run beside them. On two cores (`-n 3`): two computing tests, and the e2e module.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

WAITING_MARK = "e2e"  # tests that wait far more than they compute


def _slots() -> list[Path]:
    """The slot files of this test run (none outside xdist: one process, nothing to share)."""
    run, workers = (
        os.environ.get("PYTEST_XDIST_TESTRUNUID"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if not run or not workers or int(workers) < 2:
        return []
    folder = Path(tempfile.gettempdir()) / f"fl-system-cpu-slots-{run}"
    folder.mkdir(exist_ok=True)
    return [folder / f"slot-{i}" for i in range(int(workers) - 1)]


def _take(slots: list[Path]) -> int:
    """Wait for a free slot; returns the open descriptor that holds it."""
    while True:
        for slot in slots:
            fd = os.open(slot, os.O_CREAT | os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        time.sleep(0.05)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    slots = [] if item.get_closest_marker(WAITING_MARK) else _slots()
    fd = _take(slots) if slots else None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases its lock
