"""Flower's differential privacy around our strategies, through fl-run (simulation)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from tests.integration.conftest import QUICK, run_cli

pytestmark = pytest.mark.integration

# Three equal partitions (479 digits each): data-size weights are uniform too, so a DP run
# (uniform mean) and a plain one average alike.
SIM = ["runtime=simulation", *QUICK, "num_clients=3"]


def _model(run_dir: Path) -> dict[str, np.ndarray]:
    return load_checkpoint(run_dir / "checkpoint.npz").model


def test_no_noise_and_a_clip_above_every_update_is_the_run_without_dp(
    tmp_path: Path, cli_env
) -> None:
    """Client-side clipping (Flower's fixedclipping_mod on our ClientApp, plain messages) with
    sigma = 0 and C = 1e6 ends with the model of the run without privacy."""
    plain, private = tmp_path / "plain", tmp_path / "private"
    for run_dir, extra in (
        (plain, []),
        (
            private,
            ["privacy=client_fixed", "privacy.noise_multiplier=0", "privacy.clipping_norm=1e6"],
        ),
    ):
        done = run_cli([*SIM, "num_rounds=2", *extra, f"hydra.run.dir={run_dir}"], cli_env)
        assert done.returncode == 0, done.stderr[-3000:]
    a, b = _model(plain), _model(private)
    assert list(a) == list(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)
    rows = MetricsLog(private / "metrics.csv").rows()
    assert "dp_epsilon" not in rows[0]  # sigma = 0: nothing to account


def test_an_accounted_run_clips_reports_flowers_epsilon_and_resumes_its_account(
    tmp_path: Path, cli_env
) -> None:
    """Server-side fixed clipping, sigma = 1, C = 0.5, the clients' statistics published: every
    update the server averages has norm <= C, the weights are uniform, and dp_epsilon after
    each round is what Flower's RdpAccountant gives for that many releases, across a resume.
    The checkpoint holds no generator state: the same checkpoint resumed twice draws two
    different noises."""
    run_dir, again = tmp_path / "run", tmp_path / "again"
    dp = [
        "privacy=central_fixed",
        "privacy.noise_multiplier=1.0",
        "privacy.clipping_norm=0.5",
        "privacy.publish_client_stats=true",
    ]
    first = run_cli(
        [*SIM, *dp, "num_rounds=2", "keep_client_state=true", f"hydra.run.dir={run_dir}"],
        cli_env,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert "warning: privacy.publish_client_stats=true" in first.stderr
    checkpoint = load_checkpoint(run_dir / "checkpoint.npz")
    assert sorted(k for k in checkpoint.strategy_state if k.startswith("privacy/")) == [
        "privacy/account"
    ]
    assert not [k for k in checkpoint.strategy_state if "rng" in k or "random" in k]
    shutil.copytree(run_dir, again)
    for resumed_dir in (run_dir, again):
        resumed = run_cli(
            [
                *SIM,
                *dp,
                "num_rounds=3",
                "resume=true",
                "keep_client_state=true",
                f"hydra.run.dir={resumed_dir}",
            ],
            cli_env,
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
    ends = _model(run_dir), _model(again)
    assert any(not np.array_equal(ends[0][k], ends[1][k]) for k in ends[0])
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["round"] for r in rows] == ["1", "2", "3"]
    accountant = RdpAccountant(
        PrivacyConfig(
            target_delta=1e-5,
            population_size=3,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
    for row in rows:
        accountant.compose(GaussianPrivacyEvent(1.0, 3, 3))
        assert float(row["dp_epsilon"]) == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-12)
        assert float(row["update_norm_max"]) <= 0.5 * (1 + 1e-6)
        assert [float(row[f"weight_{p}"]) for p in range(3)] == pytest.approx([1 / 3] * 3)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["dp_epsilon"] == pytest.approx(float(rows[-1]["dp_epsilon"]))
    assert summary["dp_delta"] == 1e-5
