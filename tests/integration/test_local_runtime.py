"""runtime=local: a real SuperLink and SuperNodes over gRPC, started by the CLI.

Starting a federation per run is slow, so only FedAvg runs here; every algorithm runs over
gRPC on one shared hand-started federation in test_algorithms_grpc.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fl_system.launch.processes import alive
from tests.integration.conftest import QUICK, check_two_round_run, interrupt_when, run_cli

pytestmark = pytest.mark.integration


def test_two_rounds_over_grpc(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """fl-run starts, uses and tears down its own federation; the run directory is complete."""
    run_dir = tmp_path / "run"
    result = run_cli(
        ["algorithm=fedavg", *QUICK, "num_rounds=2", f"hydra.run.dir={run_dir}"], cli_env
    )
    check_two_round_run(result, run_dir)
    # The SuperNodes really ran as separate processes and logged their messages.
    logs = run_dir / "logs"
    for pid in range(2):
        assert "ClientApp task" in (logs / f"supernode-{pid}.log").read_text()


def test_sigterm_mid_run_leaves_no_process(tmp_path: Path, cli_env: dict[str, str]) -> None:
    run_dir = tmp_path / "run"
    stopped = interrupt_when(
        [*QUICK, "num_rounds=50", f"hydra.run.dir={run_dir}"],
        cli_env,
        ready=(run_dir / "metrics.csv").exists,  # the federation is up and training
        sig=signal.SIGTERM,
    )
    # SuperLink, 2 SuperNodes, flwr run, and their helpers were running.
    assert len(stopped.process_tree) >= 4
    assert stopped.returncode == 143
    assert "terminated" in stopped.stderr
    assert [pid for pid in stopped.process_tree if alive(pid)] == []
