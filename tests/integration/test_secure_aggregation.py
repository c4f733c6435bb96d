"""secagg=secaggplus through fl-run: in simulation a round's secure average is the clear one's
within the bound the round reports (FedAvg, FedDisco's weights, SCAFFOLD's control variate),
and DP on the clients is accounted; on real SuperNodes (runtime=local) a node killed after
sharing its keys is left out of the sum, and with fewer survivors than the threshold the round
fails in one line, the model stays and the next round runs; what needs each client's update is
refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fl_system.privacy import PrivacyAccount
from fl_system.privacy.secagg import SecAggSettings
from fl_system.records.checkpoint import load_checkpoint

from .conftest import kill_supernodes_mid_run, run_cli
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


def test_nodes_killed_after_sharing_their_keys_are_left_out_or_fail_the_round(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime=local, 5 SuperNodes, a threshold of 0.8 of the shares; partitions 2-4 train
    slowly (clients.slow). Round 1: partition 4 is SIGKILLed when its training message (after
    setup and key sharing) arrives: the other four are summed, its masks removed. Round 2:
    partitions 2 and 3 die the same way, fewer survivors than the threshold: the round fails
    in one line and the model stays. Round 3 (fl-run restarts killed nodes) sums whoever is
    there."""
    run_dir = tmp_path / "run"
    args = [*BASE, "runtime=local", "num_clients=5", "num_rounds=3", "secagg=secaggplus"]
    args += ["secagg.reconstruction_threshold=0.8", "clients.slow.ids=[2,3,4]"]
    args += ["clients.slow.seconds_per_step=0.4", "round_timeout=120"]
    args.append(f"hydra.run.dir={run_dir}")

    def at_training(partition: int, rnd: int) -> Callable[[], bool]:
        """Round `rnd`'s training message to `partition` has arrived (4 a round: setup,
        keys, training, unmasking)."""
        log = run_dir / "logs" / f"supernode-{partition}.log"
        at = 4 * (rnd - 1) + 3
        return lambda: log.exists() and log.read_text().count("Receiving: train message") >= at

    kills = {4: at_training(4, 1), 3: at_training(3, 2), 2: at_training(2, 2)}
    code, output = kill_supernodes_mid_run(args, cli_env, kills)
    assert code == 0, output[-3000:]
    first, second, third = metrics_rows(run_dir)
    said = (run_dir / "logs" / "serverapp.log").read_text()
    assert (first["participants"], first["secagg_summed"], first["secagg_dropped"]) == (
        "4",
        "4",
        "1",
    ), said
    assert second["participants"] == "0", said
    assert "round 2: secure aggregation failed: after training, " in said
    assert "the model stays" in said and second["test_accuracy"] == first["test_accuracy"]
    assert int(third["participants"]) >= 2 and third["secagg_summed"] == third["participants"]
    assert third["test_accuracy"] != second["test_accuracy"]


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
