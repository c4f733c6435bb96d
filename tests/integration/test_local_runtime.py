"""runtime=local: a real SuperLink and SuperNodes over gRPC, started by the CLI."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from fl_system.launch.processes import alive
from fl_system.results import METRIC_COLUMNS, MetricsLog
from tests.integration.conftest import QUICK, interrupt_when, run_cli

pytestmark = pytest.mark.integration

SUMMARY_KEYS = {
    "final_accuracy",
    "best_accuracy",
    "rounds",
    "rounds_to_target",
    "seconds_to_target",
    "bytes_up",
    "bytes_down",
    "wall_seconds",
}


ALGORITHMS = {
    "fedavg": ["algorithm=fedavg"],
    "fedprox": ["algorithm=fedprox"],
    "feddisco": ["algorithm=feddisco"],
    "scaffold": ["algorithm=scaffold"],
    "fednova": ["algorithm=fednova"],
    "feddyn": ["algorithm=feddyn"],
    "moon": ["algorithm=moon"],
    "scaffold+disco": ["algorithm=scaffold", "algorithm.disco.enabled=true"],
}


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_two_rounds_over_grpc(algorithm: str, tmp_path: Path, cli_env: dict[str, str]) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [*ALGORITHMS[algorithm], *QUICK, "num_rounds=2", f"hydra.run.dir={run_dir}"], cli_env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "final accuracy" in result.stdout
    assert f"run directory: {run_dir}" in result.stdout
    for name in ("config.yaml", "metrics.csv", "summary.json", "curve.png", "checkpoint.npz"):
        assert (run_dir / name).is_file(), name
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["round"] for r in rows] == ["1", "2"]
    assert set(METRIC_COLUMNS) <= set(rows[0])
    assert all(r["participants"] == "2" and r["failures"] == "0" for r in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["rounds"] == 2 and 0.0 <= summary["final_accuracy"] <= 1.0
    # Every participant's aggregation weight is recorded, and they sum to one.
    weights = [float(rows[1][f"weight_{pid}"]) for pid in range(2)]
    assert sum(weights) == pytest.approx(1.0)
    # Real bytes crossed gRPC: at least the MLP's float32 weights, each way, per client.
    mlp_bytes = 4 * (64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)
    assert int(rows[1]["bytes_down"]) >= 2 * mlp_bytes
    assert int(rows[1]["bytes_up"]) >= 2 * mlp_bytes
    # The SuperNodes really ran as separate processes and logged their messages.
    logs = run_dir / "logs"
    assert "ClientApp task" in (logs / "supernode-0.log").read_text()


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
