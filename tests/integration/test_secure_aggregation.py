"""secagg=secaggplus through fl-run's simulation: a round's secure average is plain FedAvg's
within the bound the round reports, and what needs each client's update is refused in one
line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_system.records.checkpoint import load_checkpoint

from .conftest import run_cli
from .resumed import metrics_rows

pytestmark = pytest.mark.integration

BASE = ["dataset=digits", "model=mlp", "runtime=simulation", "train.local_steps=5"]


def test_a_secure_round_is_fedavgs_within_the_bound_it_reports(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Five clients, one round, the same seed with and without SecAgg+: the models differ by
    no more than the round's secagg_error_bound (quantisation and the weights' rounding), the
    protocol's four exchanges moved bytes, and every client was summed."""
    args = [*BASE, "num_clients=5", "num_rounds=1"]
    for name, extra in (("plain", []), ("secure", ["secagg=secaggplus"])):
        result = run_cli([*args, *extra, f"hydra.run.dir={tmp_path / name}"], cli_env)
        assert result.returncode == 0, result.stderr[-2000:]
    plain, secure = (load_checkpoint(tmp_path / n / "checkpoint.npz") for n in ("plain", "secure"))
    (row,) = metrics_rows(tmp_path / "secure")
    bound = float(row["secagg_error_bound"])
    diff = max(
        float(np.max(np.abs(plain.model[k].astype(np.float64) - secure.model[k])))
        for k in plain.model
    )
    assert 0 < diff <= bound < 1e-4, (diff, bound)
    assert (row["secagg_summed"], row["secagg_dropped"], row["failures"]) == ("5", "0", "0")
    for stage in ("setup", "keys", "unmask"):
        assert (
            int(row[f"bytes_up_secagg_{stage}"]) > 0 and int(row[f"bytes_down_secagg_{stage}"]) > 0
        )


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["algorithm=scaffold"], "algorithm=scaffold: its replies carry the change of its"),
        (["algorithm=fednova"], "algorithm=fednova: it combines the client models by a rule"),
        (["algorithm=taco", "train.local_steps=4"], "algorithm=taco: it decides its coefficients"),
        (
            ["algorithm=fedbuff", "system=mobile"],
            "algorithm=fedbuff: it takes the clients' updates",
        ),
        (["algorithm.disco.enabled=true"], "algorithm=fedavg: Disco weighs each client"),
        (["aggregation.robust=median"], "aggregation.robust=median: the rule needs each client's"),
        (["compression.up=st"], "compression.up=st: masks need dense vectors"),
        (["privacy=central_fixed"], "privacy=central_fixed: the server clips each client's"),
        (["clients_per_round=1"], "needs 2 clients a round or more, got 1"),
        (["secagg.modulus_range=1000"], "secagg=secaggplus: `modulus_range` must be"),
    ],
)
def test_what_needs_each_clients_update_is_refused_in_one_line(
    extra: list[str], line: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    args = [*BASE, "num_clients=4", "secagg=secaggplus", *extra, f"hydra.run.dir={tmp_path}"]
    result = run_cli(args, cli_env, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [x for x in result.stderr.splitlines() if "error" in x.lower()]
    assert len(errors) == 1 and line in errors[0], result.stderr
