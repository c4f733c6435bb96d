"""runtime=remote: submit to a SuperLink and SuperNodes that were started by hand (Flower's own
SuperLink here; fl-server in the other modules)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from fl_system.launch.processes import alive, descendants
from tests.integration.conftest import QUICK, HandStartedFederation, run_cli

pytestmark = pytest.mark.integration


def test_submit_to_a_running_federation(tmp_path: Path, cli_env: dict[str, str]) -> None:
    federation = HandStartedFederation(tmp_path, cli_env)
    try:
        federation.start_superlink(flower=True)
        for pid in range(2):
            federation.start_supernode(pid, 2, f"supernode-{pid}.log")
        run_dir = tmp_path / "run"
        result = run_cli(
            [*QUICK, "num_rounds=2", *federation.remote_args(), f"hydra.run.dir={run_dir}"],
            cli_env,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 2
        assert federation.procs.first_dead() is None  # the federation outlives the run
    finally:
        federation.stop()


def test_fl_server_stops_when_its_serverapp_launcher_dies(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Without the launcher that forks each run's ServerApp no run could start: fl-server
    stops its SuperLink and exits 2 with one line saying why, leaving no process."""
    federation = HandStartedFederation(tmp_path, cli_env)
    try:
        federation.start_superlink()
        server = federation.procs.procs[0][1]
        launchers = [p for p in descendants(server.pid) if "supernode.launcher" in _cmdline(p)]
        assert len(launchers) == 1
        tree = descendants(server.pid)
        os.kill(launchers[0], signal.SIGKILL)
        assert server.wait(timeout=60) == 2
        log = (tmp_path / "superlink.log").read_text()
        assert "fl-server: error: the ServerApp launcher exited with code -9" in log
        assert "Traceback" not in log
        assert [pid for pid in tree if alive(pid)] == []
    finally:
        federation.stop()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
