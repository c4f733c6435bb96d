"""fl_system's strategies run by Flower's own `Strategy.start` in a ServerApp of one's own,
against this project's ClientApp, in Flower's simulation engine (the gRPC case shares the
federation of test_algorithms_grpc.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_system.compose import CONF_DIR, compose_experiment
from fl_system.evaluation import evaluate
from fl_system.experiment import build_model, load_dataset, partition_indices
from fl_system.preflight import check_parts
from fl_system.validation import ConfigError
from tests.integration.conftest import QUICK, env_in, run_cli
from tests.integration.flower_app import LOOP_APP, readme_server_app, simulate, write_app

pytestmark = pytest.mark.integration

ALGORITHMS = sorted(p.stem for p in (CONF_DIR / "algorithm").glob("*.yaml"))
# Two rounds of every algorithm; TACO's default lam (T/5) would expel everyone after one.
COMMON = [*QUICK, "num_rounds=2", "train.local_steps=20"]
EXTRA = {"taco": ["algorithm.lam=6"]}
# Top-k uploads keep 1 % of each update (q = 0.01) and learn slower in two rounds
# (9 % -> 27 % on this config: through fl-run's own driver too, to the digit)
MIN_GAIN = {"fedavg, compressed": 0.1}


def _env(root: Path) -> dict[str, str]:
    env = env_in(root)
    env["FL_STATE_DIR"] = str(root / "node-state")
    return env


def test_every_algorithm_runs_two_rounds_under_flowers_start(tmp_path: Path) -> None:
    """One stock ServerApp calls `strategy.start` for each algorithm in turn (and FedAvg with
    compression both ways): each is a Flower Strategy, trains two rounds, and its model beats
    the initial one."""
    cases = {name: [*COMMON, f"algorithm={name}", *EXTRA.get(name, [])] for name in ALGORITHMS}
    cases["fedavg, compressed"] = [*COMMON, "compression.up=topk", "compression.down=fp16"]
    app = write_app(tmp_path / "app", LOOP_APP) / "my_app"
    (app / "cases.json").write_text(json.dumps(cases))
    done = simulate(app / "server_app.py", 2, tmp_path, _env(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((app / "results.json").read_text())
    assert sorted(results) == sorted(cases), done.stderr[-3000:]
    for name, got in results.items():
        assert got["is_flower_strategy"], name
        assert got["train_rounds"] == [1, 2], name
        accuracy = got["accuracy"]
        assert sorted(accuracy) == ["0", "1", "2"], name
        assert accuracy["2"] > accuracy["0"] + MIN_GAIN.get(name, 0.2), (name, accuracy)


def test_the_readme_flower_app_trains_feddisco(tmp_path: Path) -> None:
    """The README's ServerApp, word for word: FedDisco on four simulated SuperNodes, three
    rounds, the final model saved where Flower's template saves it."""
    app = write_app(tmp_path / "app", readme_server_app()) / "my_app"
    done = simulate(app / "server_app.py", 4, tmp_path, _env(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    experiment = compose_experiment(
        ["algorithm=feddisco", "num_clients=4", "partition=dirichlet", "num_rounds=3"]
    )
    data = load_dataset(experiment)
    model = build_model(experiment)
    initial, _ = evaluate(model, data.x_test, data.y_test, device=torch.device("cpu"))
    model.load_state_dict(torch.load(tmp_path / "final_model.pt"))
    final, _ = evaluate(model, data.x_test, data.y_test, device=torch.device("cpu"))
    assert final > initial + 0.3, (initial, final)
    # The round's weights are Disco's, from the d_k the clients reported, not data sizes
    logged = re.search(r"Aggregated MetricRecord: (\{.*\})", done.stdout + done.stderr)
    assert logged is not None, done.stderr[-3000:]
    weights = {int(k): v for k, v in re.findall(r"'weight_(\d+)': ([-0-9.e]+)", logged.group(1))}
    sizes = np.array([len(p) for p in partition_indices(experiment, 4)], dtype=float)
    assert sorted(weights) == [0, 1, 2, 3]
    by_size = sizes / sizes.sum()
    assert max(abs(float(weights[k]) - by_size[k]) for k in range(4)) > 0.01, (weights, by_size)


# Wraps each case's strategy in Flower's DifferentialPrivacyServerSideFixedClipping (or not)
# and runs one round with Flower's own start; writes what each case said to said.json.
DP_APP = """
import json
from pathlib import Path

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping

from fl_system.compose import compose_experiment
from fl_system.experiment import build_model, build_strategy

HERE = Path(__file__).parent
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    said = {}
    for name, (overrides, wrap) in json.loads((HERE / "cases.json").read_text()).items():
        experiment = compose_experiment(overrides)
        try:
            strategy = build_strategy(experiment)
            if wrap:
                strategy = DifferentialPrivacyServerSideFixedClipping(
                    strategy, noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=2
                )
            result = strategy.start(
                grid=grid,
                initial_arrays=ArrayRecord(build_model(experiment).state_dict()),
                num_rounds=1,
            )
            said[name] = sorted(result.train_metrics_clientapp[1])
        except ValueError as err:
            said[name] = str(err)
    (HERE / "said.json").write_text(json.dumps(said))
"""
DP_REFUSED = ("feddyn", "scaffold", "fedcat", "fedacg", "efl", "taco")


def test_flowers_dp_wrapper_in_an_app_of_ones_own_refuses_what_fl_run_refuses(
    tmp_path: Path,
) -> None:
    """In a ServerApp written here, Flower's DifferentialPrivacyServerSideFixedClipping around
    FedDyn, SCAFFOLD, FedCat, FedACG, EFL or TACO fails before round 1 with fl-run's sentence;
    so does a wrapper around an experiment composed without privacy, and a strategy composed
    with privacy=central_fixed but left unwrapped. The matching one trains a round, and
    Flower's loop gets no statistic of the un-noised updates."""
    quick = COMMON  # two clients
    cases = {
        name: ([*quick, f"algorithm={name}", *EXTRA.get(name, [])], True) for name in DP_REFUSED
    }
    cases["composed without privacy"] = (quick, True)
    cases["unwrapped"] = ([*quick, "privacy=central_fixed"], False)
    cases["matching"] = ([*quick, "privacy=central_fixed"], True)
    app = write_app(tmp_path / "app", DP_APP) / "my_app"
    (app / "cases.json").write_text(json.dumps(cases))
    done = simulate(app / "server_app.py", 2, tmp_path, _env(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads((app / "said.json").read_text())
    fl_run = run_cli([*quick, "algorithm=feddyn", "privacy=central_fixed"], _env(tmp_path))
    assert fl_run.returncode == 2
    assert f"fl-run: error: {said['feddyn']}\n" in fl_run.stderr
    for name in DP_REFUSED:
        overrides = [*cases[name][0], "privacy=central_fixed"]
        with pytest.raises(ConfigError) as refused:
            check_parts(compose_experiment(overrides))
        assert said[name] == str(refused.value), name
        assert said[name].startswith(
            f"privacy=central_fixed does not compose with algorithm={name}"
        )
    assert said["composed without privacy"].startswith(
        "Flower's DifferentialPrivacyServerSideFixedClipping wraps a strategy whose experiment "
        "has privacy=none: compose it with privacy=central_fixed"
    )
    assert said["unwrapped"].startswith(
        "the experiment has privacy=central_fixed but its strategy runs without Flower's "
        "DifferentialPrivacyServerSideFixedClipping around it"
    )
    assert said["matching"] == [], said["matching"]  # round 1 trained, its metrics withheld
    assert "train_loss" not in done.stdout + done.stderr
