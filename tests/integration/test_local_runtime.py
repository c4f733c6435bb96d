"""runtime=local: a real SuperLink and SuperNodes over gRPC, started by the CLI.

Starting a federation per run is slow, so only FedGSNR (FedAvg with a statistics exchange
before training) runs here; every other algorithm runs over gRPC on one shared hand-started
federation in test_algorithms_grpc.py.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from fl_system.launch.processes import alive
from fl_system.results import MetricsLog
from tests.integration.conftest import QUICK, check_two_round_run, interrupt_when, run_cli

pytestmark = pytest.mark.integration


def test_two_rounds_over_grpc(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """fl-run starts, uses and tears down its own federation; the run directory is complete.

    FedGSNR: each round asks both clients for gradient statistics, then trains each its own
    number of steps; together they run 2 x E_const steps.
    """
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "algorithm=fedgsnr", "train.local_steps=6", *QUICK, "num_rounds=2",
            f"hydra.run.dir={run_dir}",
        ],
        cli_env,
    )  # fmt: skip
    check_two_round_run(result, run_dir)
    for row in MetricsLog(run_dir / "metrics.csv").rows():
        steps = [int(row[f"steps_{pid}"]) for pid in range(2)]
        assert sum(steps) == 12 and min(steps) >= 1, row
        assert all(float(row[f"{key}_{pid}"]) > 0 for key in ("n_opt", "gsnr") for pid in range(2))
        # the statistics exchange moved about two models up per client (mean and variance)
        assert int(row["bytes_up_gsnr"]) > 1.9 * int(row["bytes_up_train"])
        exchanges = int(row["bytes_up_gsnr"]) + int(row["bytes_up_train"])
        handshakes = int(row["bytes_up"]) - exchanges  # counted into round 1
        assert handshakes >= 0 if row["round"] == "1" else handshakes == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["contribution"]) == {"0", "1"}
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
