"""A checkpoint written by older code resumes: the settings it predates take their defaults."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from tests.integration.conftest import run_cli

pytestmark = pytest.mark.integration

OLD = Path(__file__).resolve().parents[1] / "data" / "checkpoint-c1d88d6.npz"
# the overrides that made it (tests/data/README.md), but for num_rounds
ARGS = [
    "runtime=simulation",
    "dataset=digits",
    "model=mlp",
    "model.hidden=[8]",
    "num_clients=2",
    "seed=0",
]
FILLED = re.compile(r"^fl-run: the checkpoint predates (.+): resuming with their defaults$", re.M)


def test_a_checkpoint_from_commit_c1d88d6_continues_from_its_round_and_model(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """The checkpoint of round 2 written by the code at commit c1d88d6, before `clients`,
    `compression` and `stragglers` existed, resumes for round 3: the round numbers go on, the
    run keeps its id, and round 3 starts from the saved model, so the run ends where today's
    uninterrupted 3-round run of the same experiment ends (FedAvg on digits trains today as
    it did then)."""
    saved = load_checkpoint(OLD)
    assert saved.round == 2
    assert not {"clients", "compression", "stragglers"} & set(saved.config)
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    resumed.mkdir()
    shutil.copyfile(OLD, resumed / "checkpoint.npz")

    result = run_cli([*ARGS, "num_rounds=3", "resume=true", f"hydra.run.dir={resumed}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    filled = FILLED.search(result.stdout)
    assert filled is not None, result.stdout
    assert {"clients", "compression", "stragglers", "algorithm.gsnr"} <= set(
        filled.group(1).split(", ")
    )
    assert "resuming after round 2" in (resumed / "logs" / "serverapp.log").read_text()
    assert [row["round"] for row in MetricsLog(resumed / "metrics.csv").rows()] == ["3"]
    after = load_checkpoint(resumed / "checkpoint.npz")
    assert after.round == 3
    assert after.config["run_id"] == saved.config["run_id"]
    assert list(after.model) == list(saved.model)

    result = run_cli([*ARGS, "num_rounds=3", f"hydra.run.dir={straight}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = load_checkpoint(straight / "checkpoint.npz")
    # The checkpoint's rounds 1-2 ran on the machine that made it, the straight run's here:
    # two CPUs' float kernels may differ in the last bit (seen: up to 3e-8 on an Intel Xeon).
    # A resume from the wrong model or with the wrong seeds differs by orders
    # of magnitude more than this tolerance.
    for name, array in reference.model.items():
        np.testing.assert_allclose(after.model[name], array, rtol=1e-5, atol=1e-6, err_msg=name)
    assert any(not np.array_equal(after.model[k], saved.model[k]) for k in saved.model)


def test_a_setting_the_old_checkpoint_predates_set_away_from_its_default_is_one_line(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    run_dir = tmp_path / "resumed"
    run_dir.mkdir()
    shutil.copyfile(OLD, run_dir / "checkpoint.npz")
    args = [*ARGS, "num_rounds=3", "resume=true", "clients.corrupt.ids=[0]"]
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], cli_env)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fl-run: error: cannot resume: the checkpointed run predates clients.corrupt.ids, "
        "which is [0] now (its default is [])"
    )
    assert sorted(p.name for p in run_dir.iterdir()) == [".hydra", "checkpoint.npz"]
