"""runtime=remote: submit to a SuperLink and SuperNodes that were started by hand (Flower's own
SuperLink here; fl-server in the other modules)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fl_system.records.checkpoint import checkpoint_round
from fl_system.records.results import MetricsLog
from fl_system.runtime.launch.processes import alive, descendants
from fl_system.runtime.launch.submit import CONNECTION, Connection, write_flwr_home
from tests.integration.conftest import (
    QUICK,
    HandStartedFederation,
    interrupt_when,
    run_cli,
    start_fl_run,
)

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
        for detach in (False, True):
            _stop_fl_run(tmp_path, cli_env, federation, detach)
        _lose_the_superlink(tmp_path, cli_env, federation)
    finally:
        federation.stop()


def _lose_the_superlink(
    tmp_path: Path, env: dict[str, str], federation: HandStartedFederation
) -> None:
    """The SuperLink stops mid-run (its ServerApp with it): fl-run says so, with the rounds
    saved and the resume command, and leaves failure.txt saying the same."""
    run_dir = tmp_path / "superlink-lost"
    args = [*QUICK, "num_rounds=500", *federation.remote_args(), f"hydra.run.dir={run_dir}"]
    run = start_fl_run(args, env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not checkpoint_round(run_dir / "checkpoint.npz"):  # a round is saved
            assert run.poll() is None and time.monotonic() < deadline, _logs_tail(tmp_path)
            time.sleep(0.2)
        superlink = federation.procs.procs[0][1]
        helpers = descendants(superlink.pid)  # its SuperExec and ServerApp: sessions of their own
        os.killpg(superlink.pid, signal.SIGKILL)
        for pid in helpers:  # the machine is gone: nothing of it may poll on for ever
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err[-2000:]
    said = f"the SuperLink at 127.0.0.1:{federation.port} stopped or cannot be reached any more"
    assert f"fl-run: error: {said}; rounds up to " in err, err[-2000:]
    failure = (run_dir / "failure.txt").read_text()
    assert failure.startswith(said) and f"resume=true hydra.run.dir={run_dir}" in failure


def _logs_tail(root: Path, lines: int = 15) -> str:
    """The last lines of every log of the federation and of the run, to see where it stood."""
    logs = sorted(root.glob("*.log")) + sorted(root.glob("*/logs/*.log"))
    return "\n".join(
        f"--- {log.relative_to(root)}\n" + "\n".join(log.read_text().splitlines()[-lines:])
        for log in logs
    )


def _stop_fl_run(
    tmp_path: Path, env: dict[str, str], federation: HandStartedFederation, detach: bool
) -> None:
    """SIGTERM on fl-run stops the run on the server (`flwr stop`), not only fl-run; with
    runtime.detach=true the run goes on there and fl-run says how to follow and stop it."""
    run_dir = tmp_path / f"stopped-detach-{detach}"
    metrics = run_dir / "metrics.csv"
    stopped = interrupt_when(
        [
            *QUICK, "num_rounds=500", *federation.remote_args(),
            f"runtime.detach={str(detach).lower()}", f"hydra.run.dir={run_dir}",
        ],
        env,
        ready=lambda: metrics.exists() and len(MetricsLog(metrics).rows()) >= 1,
        sig=signal.SIGTERM,
    )  # fmt: skip
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    log = (run_dir / "logs" / "serverapp.log").read_text()
    run_id = int(re.findall(r"Successfully started run (\d+)", log)[-1])
    flwr_home = tmp_path / f"flwr-home-{detach}"
    write_flwr_home(flwr_home, Connection(f"127.0.0.1:{federation.port}", insecure=True))
    flwr_env = {**env, "FLWR_HOME": str(flwr_home)}

    def status() -> str:
        listed = subprocess.run(
            ["flwr", "ls", CONNECTION, "--run-id", str(run_id), "--format", "json"],
            env=flwr_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return json.loads(listed.stdout[listed.stdout.find("{") :])["runs"][0]["status"]

    if detach:
        assert f"fl-run: terminated; detached from Flower run {run_id}, which goes on" in (
            stopped.stderr
        )
        assert status() == "running"
        subprocess.run(["flwr", "stop", str(run_id), CONNECTION], env=flwr_env, timeout=60)
    else:
        assert (
            f"fl-run: terminated; Flower run {run_id} was stopped on the server; rounds up to "
            in stopped.stderr
        ), stopped.stderr[-2000:]
        assert "resume=true hydra.run.dir=" in stopped.stderr
    assert status().endswith(":stopped")


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
