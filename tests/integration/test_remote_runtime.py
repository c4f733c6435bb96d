"""runtime=remote: submit to a SuperLink and SuperNodes that were started by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import QUICK, HandStartedFederation, run_cli

pytestmark = pytest.mark.integration


def test_submit_to_a_running_federation(tmp_path: Path, cli_env: dict[str, str]) -> None:
    federation = HandStartedFederation(tmp_path, cli_env)
    try:
        federation.start_superlink()
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
