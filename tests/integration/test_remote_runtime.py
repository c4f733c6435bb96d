"""runtime=remote: submit to a SuperLink and SuperNodes that were started by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_system.launch.processes import ProcessGroup, free_port, port_open, tool_env
from tests.integration.conftest import QUICK, run_cli

pytestmark = pytest.mark.integration


def _wait_for_port(port: int, procs: ProcessGroup) -> None:
    import time

    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        assert procs.first_dead() is None, "the SuperLink exited during start-up"
        assert time.monotonic() < deadline, f"port {port} not open after 60 s"
        time.sleep(0.2)


def test_submit_to_a_running_federation(tmp_path: Path, cli_env: dict[str, str]) -> None:
    fleet, control, appio = free_port(), free_port(), free_port()
    env = tool_env({"FL_CACHE_DIR": cli_env["FL_CACHE_DIR"]})
    procs = ProcessGroup()
    try:
        procs.start(
            "superlink",
            [
                "flower-superlink", "--insecure",
                "--fleet-api-address", f"127.0.0.1:{fleet}",
                "--control-api-address", f"127.0.0.1:{control}",
                "--port", str(appio),
                "--disable-runtime-dependency-installation",
            ],
            tmp_path / "superlink.log",
            env,
        )  # fmt: skip
        _wait_for_port(control, procs)
        for pid in range(2):
            procs.start(
                f"supernode {pid}",
                [
                    "flower-supernode", "--insecure",
                    "--superlink", f"127.0.0.1:{fleet}",
                    "--node-config", f"partition-id={pid} num-partitions=2",
                    "--port", str(free_port()),
                ],
                tmp_path / f"supernode-{pid}.log",
                env,
            )  # fmt: skip
        run_dir = tmp_path / "run"
        result = run_cli(
            [
                *QUICK,
                "num_rounds=2",
                "runtime=remote",
                f"runtime.address=127.0.0.1:{control}",
                "runtime.insecure=true",
                f"hydra.run.dir={run_dir}",
            ],
            cli_env,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 2
        assert procs.first_dead() is None  # the federation outlives the run it served
    finally:
        procs.stop()
