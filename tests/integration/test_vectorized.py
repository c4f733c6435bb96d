"""runtime.backend=vectorized: a round's clients trained in lockstep in the engine's process
end each round where the process backend's ClientApps end it; a rule that changes each step
trains on the process backend, in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from tests.integration.conftest import run_cli

pytestmark = pytest.mark.integration

# 5 clients of unequal digits partitions (batches of 24, the last ones short), momentum and
# weight decay, 2 local epochs, 3 clients a round (the others wait); 4 rounds
RUN = [
    "runtime=simulation", "dataset=digits", "model=mlp", "num_clients=5", "partition=dirichlet",
    "train.batch_size=24", "train.local_epochs=2", "train.momentum=0.9",
    "train.weight_decay=1e-4", "clients_per_round=3", "num_rounds=4", "seed=5",
]  # fmt: skip


def _run(backend: str, tmp_path: Path, env: dict[str, str], *extra: str):
    run_dir = tmp_path / backend
    args = [*RUN, *extra, f"runtime.backend={backend}", f"hydra.run.dir={run_dir}"]
    result = run_cli(args, env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, run_dir


def test_clients_in_lockstep_end_every_round_where_the_process_backend_ends_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    _, process = _run("process", tmp_path, cli_env)
    said, vectorized = _run("vectorized", tmp_path, cli_env, "runtime.vectorize_chunk=2")
    assert "runtime.backend=vectorized:" not in said.stdout  # no fallback for FedAvg
    log = (vectorized / "logs" / "serverapp.log").read_text()
    assert log.count("vectorized: 3 train messages, 2 chunk(s)") == 4, log[-3000:]
    rows = {d: MetricsLog(d / "metrics.csv").rows() for d in (process, vectorized)}
    assert [r["participants"] for r in rows[vectorized]] == ["3"] * 4
    for ours, theirs in zip(rows[vectorized], rows[process], strict=True):
        assert abs(float(ours["test_accuracy"]) - float(theirs["test_accuracy"])) <= 0.002
        assert float(ours["train_loss"]) == pytest.approx(float(theirs["train_loss"]), rel=1e-5)
    ends = [load_checkpoint(d / "checkpoint.npz").model for d in (vectorized, process)]
    for name, weights in ends[1].items():
        np.testing.assert_allclose(ends[0][name], weights, rtol=1e-5, atol=1e-6)


def test_a_rule_that_changes_each_step_trains_on_the_process_backend_saying_so(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    said, run_dir = _run("vectorized", tmp_path, cli_env, "algorithm=fedprox", "num_rounds=1")
    line = (
        "fl-run: runtime.backend=vectorized: algorithm=fedprox: its client rule FedProxRule "
        "changes every step (loss_term), which clients in lockstep cannot take; its clients "
        "train on runtime.backend=process"
    )
    assert said.stdout.count(line) == 1, said.stdout
    assert OmegaConf.load(run_dir / "config.yaml").runtime.backend == "process"
