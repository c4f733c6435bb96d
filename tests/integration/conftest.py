"""Runs the real `fl-run` CLI as a subprocess, as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fl_system.launch.processes import descendants

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
