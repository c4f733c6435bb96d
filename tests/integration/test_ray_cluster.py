"""runtime=simulation on a Ray cluster that runs already (`ray start --head`), as a user runs it:
with Ray's token authentication on, as the README sets it up."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fl_system.runtime.launch import ray_cluster
from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, tool_env
from fl_system.runtime.launch.ray_cluster import ClusterError
from tests.integration.conftest import QUICK, run_cli

pytestmark = pytest.mark.integration

RAY = str(Path(sys.executable).parent / "ray")


@pytest.fixture
def ray_head(
    tmp_path: Path, cli_env: dict[str, str]
) -> Iterator[tuple[str, ProcessGroup, dict[str, str]]]:
    """A one-node cluster started by `ray start --head --block` in a session of its own (its
    processes end with it), with the test's cache and a token of its own (0600, as a
    user's); its address, and the environment that holds the token."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    token = tmp_path / "ray-token"
    token.write_text(secrets.token_hex(32))
    os.chmod(token, 0o600)
    env = {**cli_env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    procs = ProcessGroup()
    cmd = [
        RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
        f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats",
    ]  # fmt: skip
    head = procs.start("ray head", cmd, tmp_path / "ray.log", tool_env(env))
    try:
        deadline = time.monotonic() + 120
        while not port_open("127.0.0.1", port):
            assert head.poll() is None, (tmp_path / "ray.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the Ray head did not come up in 120 s"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", procs, env
    finally:
        procs.stop()
        shutil.rmtree(temp, ignore_errors=True)


def test_a_run_on_a_running_cluster_leaves_the_cluster_running_and_idle(
    ray_head: tuple[str, ProcessGroup, dict[str, str]],
    tmp_path: Path,
    cli_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address, cluster, with_token = ray_head
    run_dir = tmp_path / "run"
    args = ["runtime=simulation", f"runtime.address={address}", *QUICK, "num_rounds=2"]
    # a driver without the cluster's token is refused at once, saying why (fl-run's check,
    # in this process, without Ray's token settings)
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ClusterError) as refused:
        ray_cluster.find(address)
    assert str(refused.value) == (
        f"runtime.address={address}: the Ray cluster takes token-authenticated drivers only, "
        "and this machine sends none: set RAY_AUTH_MODE=token and the cluster's token "
        "(~/.ray/auth_token, or RAY_AUTH_TOKEN_PATH=FILE)"
    )
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], with_token, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 2
    # the run never stops what it did not start: the cluster is up, and none of its CPUs
    # stays held by the run's client actors (Ray frees them once it sees the driver gone and
    # `ray status` reports the raylet's usage a few seconds late: up to 30 s is allowed)
    host, port = address.split(":")
    assert cluster.first_dead() is None and port_open(host, int(port))
    deadline = time.monotonic() + 30
    while " 0.0/2.0 CPU" not in (status := _ray_status(address, with_token)):
        assert time.monotonic() < deadline, status
        time.sleep(1)


def _ray_status(address: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [RAY, "status", f"--address={address}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=tool_env(env),
    )
    return done.stdout
