"""A SCAFFOLD client whose SuperNode is restarted continues from its saved control variate and
its compression residual (compression.up=st with error feedback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_system.records.checkpoint import load_checkpoint
from tests.integration.conftest import QUICK, HandStartedFederation, run_cli

pytestmark = pytest.mark.integration

ARGS = [*QUICK, "algorithm=scaffold", "compression.up=st", "compression.up.q=0.1"]


def test_restarted_supernode_keeps_its_c_i(tmp_path: Path, cli_env: dict[str, str]) -> None:
    # Reference: 4 uninterrupted rounds (simulation gives the same numbers as deployment).
    reference = tmp_path / "reference"
    result = run_cli(
        [*ARGS, "runtime=simulation", "num_rounds=4", f"hydra.run.dir={reference}"], cli_env
    )
    assert result.returncode == 0, result.stderr[-3000:]

    env = {**cli_env, "FL_STATE_DIR": str(tmp_path / "node-state")}
    federation = HandStartedFederation(tmp_path, env)
    run_dir = tmp_path / "run"
    try:
        federation.start_superlink()
        for pid in range(2):
            federation.start_supernode(pid, 2, f"supernode-{pid}.log")
        first = run_cli(
            [*ARGS, *federation.remote_args(), "num_rounds=2", f"hydra.run.dir={run_dir}"], env
        )
        assert first.returncode == 0, first.stderr[-3000:]

        federation.stop_supernode(0)  # the node goes away with c_0 only on its disk
        federation.start_supernode(0, 2, "supernode-0-restarted.log")
        second = run_cli(
            [*ARGS, *federation.remote_args(), "num_rounds=4", "resume=true",
             f"hydra.run.dir={run_dir}"],
            env,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr[-3000:]
    finally:
        federation.stop()

    restarted_log = (tmp_path / "supernode-0-restarted.log").read_text()
    assert "restored client state 'scaffold-c-i'" in restarted_log
    assert "restored client state 'compression-up-residual'" in restarted_log
    # Had c_0 or the residual been lost (reset to zero), the model after round 4 would differ.
    a = load_checkpoint(reference / "checkpoint.npz")
    b = load_checkpoint(run_dir / "checkpoint.npz")
    assert a.round == b.round == 4
    for key in a.model:
        np.testing.assert_allclose(a.model[key], b.model[key], rtol=0, atol=1e-6)
