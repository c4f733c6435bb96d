"""Runs the real `fl-run` CLI as a subprocess, as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
