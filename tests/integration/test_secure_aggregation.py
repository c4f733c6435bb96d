"""secagg=secaggplus through fl-run: in simulation a round's secure average is plain FedAvg's
within the bound the round reports; on real SuperNodes (runtime=local) a node killed after
sharing its keys is left out of the sum, or, with a threshold the survivors cannot meet, the
round fails in one line, the model stays and the next round runs; what needs each client's
update is refused in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_system.privacy import PrivacyAccount
from fl_system.privacy.secagg import SecAggSettings
from fl_system.records.checkpoint import load_checkpoint

from .conftest import kill_a_supernode_mid_run, run_cli
from .resumed import metrics_rows

pytestmark = pytest.mark.integration

BASE = ["dataset=digits", "model=mlp", "runtime=simulation", "train.local_steps=5"]


@pytest.mark.parametrize(
    "algorithm",
    [
        ["algorithm=fedavg"],
        ["algorithm=feddisco", "algorithm.disco.target=global"],
        ["algorithm=scaffold"],
    ],
    ids=["fedavg", "feddisco-global", "scaffold"],
)
def test_a_secure_round_is_the_clear_ones_within_the_bound_it_reports(
    algorithm: list[str], tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Five clients on Dirichlet(0.3) shards, one round, the same seed with and without
    SecAgg+: the models differ by no more than the round's secagg_error_bound (quantisation
    and the weights' rounding), each client's weight (FedDisco's from the securely summed
    label counts) is the clear run's within 1e-6, SCAFFOLD's control variate c (the plain sum
    of the dc_k over K) the clear run's within n 2 clipping_range / (T K), the protocol's four
    exchanges moved bytes, and every client was summed."""
    args = [*BASE, *algorithm, "num_clients=5", "num_rounds=1", "partition=dirichlet"]
    args.append("partition.alpha=0.3")
    for name, extra in (("plain", []), ("secure", ["secagg=secaggplus"])):
        result = run_cli([*args, *extra, f"hydra.run.dir={tmp_path / name}"], cli_env)
        assert result.returncode == 0, result.stderr[-2000:]
    plain, secure = (load_checkpoint(tmp_path / n / "checkpoint.npz") for n in ("plain", "secure"))
    (row,) = metrics_rows(tmp_path / "secure")
    (clear,) = metrics_rows(tmp_path / "plain")
    weights = [f"weight_{i}" for i in range(5)]
    gaps = [abs(float(row[w]) - float(clear[w])) for w in weights]
    assert max(gaps) <= 1e-6, gaps
    bound = float(row["secagg_error_bound"])
    diff = max(
        float(np.max(np.abs(plain.model[k].astype(np.float64) - secure.model[k])))
        for k in plain.model
    )
    assert 0 < diff <= bound < 1e-4, (diff, bound)
    c = [k for k in plain.strategy_state if k.startswith("scaffold/c/")]
    assert len(c) == (len(plain.model) if "algorithm=scaffold" in algorithm else 0)
    settings = SecAggSettings()  # the defaults the run used
    for k in c:
        gap = float(np.max(np.abs(plain.strategy_state[k] - secure.strategy_state[k])))
        assert 0 < gap <= settings.sum_error_bound(5) / 5, (k, gap)
    assert (row["secagg_summed"], row["secagg_dropped"], row["failures"]) == ("5", "0", "0")
    for stage in ("setup", "keys", "unmask"):
        assert (
            int(row[f"bytes_up_secagg_{stage}"]) > 0 and int(row[f"bytes_down_secagg_{stage}"]) > 0
        )


def _rdp(rounds: int) -> list[tuple[str, str]]:
    """Flower's RDP account of `rounds` releases, sigma 1, all 4 of 4 clients, delta 1e-5."""
    account = PrivacyAccount(noise_multiplier=1.0, sample_size=4, population=4, delta=1e-5)
    return [(str(account.release()), "") for _ in range(rounds)]


@pytest.mark.parametrize(
    ("mode", "accounted"),
    [
        ("local", [("0.5", "1e-05"), ("1.0", "2e-05")]),  # k rounds: k epsilon, k delta
        ("client_fixed", _rdp(2)),
    ],
)
def test_dp_on_the_clients_composes_with_secure_aggregation_and_is_accounted(
    mode: str, accounted: list[tuple[str, str]], tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """privacy=local (noise on each client before masking: distributed DP) reports each
    client's composed (epsilon, delta); privacy=client_fixed (clients clip, the server
    noises the secure average) the RDP account of the released averages. Both publish who
    was summed, not the clients' statistics."""
    args = [*BASE, "num_clients=4", "num_rounds=2", f"privacy={mode}", "privacy.epsilon=0.5"]
    if mode != "local":
        args[-1] = "privacy.noise_multiplier=1.0"
    result = run_cli([*args, "secagg=secaggplus", f"hydra.run.dir={tmp_path}"], cli_env)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = metrics_rows(tmp_path)
    epsilon = "dp_local_epsilon" if mode == "local" else "dp_epsilon"
    spent = [(r[epsilon], r.get("dp_local_delta", "")) for r in rows]
    assert spent == accounted
    assert [r["secagg_summed"] for r in rows] == ["4", "4"]
    assert "train_loss" not in rows[0] and "weight_0" not in rows[0]


@pytest.mark.parametrize(
    ("threshold", "summed", "line"),
    [
        ("0.5", "4", None),  # 3 of 5 shares rebuild a secret: 4 survivors do
        ("1.0", "0", "round 1: secure aggregation failed: after training, 4 of 5 clients are"),
    ],
)
def test_a_node_killed_after_sharing_its_keys_is_left_out_or_fails_the_round(
    threshold: str, summed: str, line: str | None, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime=local, 5 SuperNodes; partition 4 trains slowly (clients.slow) and is SIGKILLed
    when its third message of round 1 (the training, after setup and key sharing) arrives.
    The other four are summed and its masks removed; or, when every share is needed, the
    round fails, the model stays, and round 2 (the node restarted) sums all five."""
    run_dir, log4 = tmp_path / "run", tmp_path / "run" / "logs" / "supernode-4.log"
    args = [*BASE, "runtime=local", "num_clients=5", "num_rounds=2", "secagg=secaggplus"]
    args += [f"secagg.reconstruction_threshold={threshold}", "clients.slow.ids=[4]"]
    args += ["clients.slow.seconds_per_step=0.4", "round_timeout=120"]
    args.append(f"hydra.run.dir={run_dir}")

    def training() -> bool:  # round 1's third message to partition 4 has arrived
        return log4.exists() and log4.read_text().count("Receiving: train message") >= 3

    code, output = kill_a_supernode_mid_run(args, cli_env, 4, training)
    assert code == 0, output[-3000:]
    first, second = metrics_rows(run_dir)
    assert first["participants"] == summed and second["participants"] == "5"
    said = (run_dir / "logs" / "serverapp.log").read_text()
    if line is None:
        assert (first["secagg_summed"], first["secagg_dropped"]) == ("4", "1")
    else:
        assert line in said and "the model stays" in said
        assert second["secagg_summed"] == "5"


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (["algorithm=stem"], "algorithm=stem: its replies carry its momentum d beside the"),
        (["algorithm=fednova"], "algorithm=fednova: it combines the client models by a rule"),
        (["algorithm=taco", "train.local_steps=4"], "algorithm=taco: it decides its coefficients"),
        (
            ["algorithm=fedbuff", "system=mobile"],
            "algorithm=fedbuff: it takes the clients' updates",
        ),
        (["algorithm.gsnr.enabled=true"], "algorithm=fedavg: its GSNR query sends each client's"),
        (["aggregation.robust=median"], "aggregation.robust=median: the rule needs each client's"),
        (["compression.up=st"], "compression.up=st: masks need dense vectors"),
        (["privacy=central_fixed"], "privacy=central_fixed: the server clips each client's"),
        (["clients_per_round=1"], "needs 2 clients a round or more, got 1"),
        (["system=mobile"], "secagg=secaggplus does not compose with system=mobile yet"),
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
