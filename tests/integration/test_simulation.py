"""runtime=simulation: reproducibility and resume."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from client_app.local_data import NodeIdentity, local_test_data, local_training_data
from fl_system.learning.evaluation import evaluate
from fl_system.learning.own_model import build_model
from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import MetricsLog
from fl_system.runtime.launch.processes import alive
from tests.integration.conftest import QUICK, interrupt_when, run_cli
from tests.integration.resumed import accuracy_history, assert_same_end, metrics_rows
from tests.integration.tracked import (
    mlflow_run,
    tensorboard,
    tensorboard_texts,
)

pytestmark = pytest.mark.integration

SIM = ["runtime=simulation", *QUICK]


def test_one_seed_one_history_even_when_interrupted_and_resumed(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A run stopped by Ctrl-C and resumed ends exactly where the uninterrupted run with the
    same seed ends, its virtual clock and the clients' sessions too (system=mobile, clients
    online 3/4 of the time); another seed gives another history; every run has its own id."""
    # the interrupt (polled every 0.2 s, sent after round 3) lands mid-run even at 0.03 s a
    # round: ~10 rounds later at the most
    rounds = 30
    straight, broken, other = tmp_path / "straight", tmp_path / "broken", tmp_path / "other"
    clock = ["system=mobile", "system.availability.fraction=0.75"]
    args = [*SIM, *clock, "system.availability.mean_session=20", "partition=dirichlet", "seed=3"]
    args.append(f"num_rounds={rounds}")
    result = run_cli([*args, f"hydra.run.dir={straight}"], cli_env, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]

    stopped = interrupt_when(
        [*args, f"hydra.run.dir={broken}"],
        cli_env,
        ready=lambda: len(metrics_rows(broken)) >= 3,  # a few rounds in, well before the end
        sig=signal.SIGINT,
    )
    assert stopped.returncode == 130
    assert [pid for pid in stopped.process_tree if alive(pid)] == []
    stopped_at = load_checkpoint(broken / "checkpoint.npz").round
    assert 3 <= stopped_at < rounds
    # the stop ended the engine before any client: no client failed (but for the sessions
    # that ended mid-round), no round went partial
    assert "Traceback" not in (broken / "logs" / "serverapp.log").read_text()
    assert {int(r["failures"]) - int(r["went_offline"]) for r in metrics_rows(broken)} == {0}
    first_id = _run_id(broken)

    result = run_cli([*args, "resume=true", f"hydra.run.dir={broken}"], cli_env, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_end(straight, broken, rounds)
    assert _run_id(broken) == first_id  # so clients find their saved state again

    other_args = [*SIM, "partition=dirichlet", "seed=4", "num_rounds=3"]
    result = run_cli([*other_args, f"hydra.run.dir={other}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert accuracy_history(other) != accuracy_history(straight)[:3]
    # the same config twice is still two runs: client state must not carry over
    assert len({_run_id(r) for r in (straight, broken, other)}) == 3


def _run_id(run_dir: Path) -> str:
    run_id = OmegaConf.load(run_dir / "config.yaml").run_id
    assert isinstance(run_id, str) and len(run_id) == 16
    return run_id


def test_gsnr_with_one_client_trains_exactly_like_its_baseline(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A lone client's statistics are the pooled ones: n_opt = 1, E = E_const, and training is
    bitwise the baseline's. It holds fewer samples than asked for and uses what it has."""
    args = [*SIM, "num_clients=1", "train.local_steps=5", "num_rounds=3"]
    plain, gsnr = tmp_path / "fedavg", tmp_path / "fedgsnr"
    for run_dir, algorithm in ((plain, ["algorithm=fedavg"]), (gsnr, ["algorithm=fedgsnr"])):
        samples = ["algorithm.gsnr.samples=100000"] if run_dir == gsnr else []
        result = run_cli([*args, *algorithm, *samples, f"hydra.run.dir={run_dir}"], cli_env)
        assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics_rows(gsnr)
    assert [r["steps_0"] for r in rows] == ["5"] * 3
    assert [float(r["n_opt_0"]) for r in rows] == pytest.approx([1.0] * 3, rel=1e-9)
    assert accuracy_history(gsnr) == accuracy_history(plain)
    a = load_checkpoint(plain / "checkpoint.npz")
    b = load_checkpoint(gsnr / "checkpoint.npz")
    for key in a.model:
        np.testing.assert_array_equal(a.model[key], b.model[key])


def test_a_diverged_run_stops_with_one_clear_error(tmp_path: Path, cli_env) -> None:
    """NaN models are not averaged into the global model; the run stops and says why, and
    its tracked run ends FAILED with that line."""
    run_dir, store = tmp_path / "nan", tmp_path / "mlflow.db"
    tracked = ["tracking=[mlflow,tensorboard]", f"tracking.uri=sqlite:///{store}"]
    result = run_cli(
        [*SIM, "num_rounds=3", "train.lr=1e30", *tracked, f"hydra.run.dir={run_dir}"], cli_env
    )
    assert result.returncode == 1
    assert (
        "fl-run: error: round 1: 0 usable replies of 2 sent (partitions 0, 1: local model has "
        "NaN or inf in " in result.stderr
    )
    assert "Traceback" not in result.stderr
    reason = (run_dir / "failure.txt").read_text().strip()
    assert reason.startswith("round 1: 0 usable replies")
    _, run = mlflow_run(store, run_dir)
    assert (run.info.status, run.data.tags["error"]) == ("FAILED", reason)
    assert tensorboard_texts(tensorboard(run_dir), "status") == [f"failed: {reason}"]


def test_a_malicious_client_is_refused_each_round_and_the_run_goes_on(
    tmp_path: Path, cli_env
) -> None:
    """clients.malicious: partition 1's NaN model is refused every round by name, the other
    three train on; a scaled-up update under aggregation.robust=median (screening off) is
    taken into the median and the run completes too."""
    four = [*SIM, "num_clients=4", "num_rounds=2", "clients.malicious.ids=[1]"]
    run_dir = tmp_path / "nan"
    result = run_cli([*four, "clients.malicious.kind=nan", f"hydra.run.dir={run_dir}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [(r["participants"], r["failures"]) for r in rows] == [("3", "1"), ("3", "1")]
    log = (run_dir / "logs" / "serverapp.log").read_text()
    assert log.count("partition 1: local model has NaN or inf in 1 of ") == 2

    run_dir = tmp_path / "median"
    robust = ["aggregation.robust=median", "aggregation.norm_ratio=null"]
    result = run_cli(
        [*four, "clients.malicious.kind=scaled", *robust, f"hydra.run.dir={run_dir}"], cli_env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [r["participants"] for r in rows] == ["4", "4"]
    assert float(rows[-1]["test_accuracy"]) > 0.5


def test_strikes_that_would_expel_every_client_expel_none_and_the_run_goes_on(
    tmp_path: Path, cli_env
) -> None:
    """TACO with the paper's strikes (strike_all), kappa = 0.1 and lam = 1: both clients
    (alpha about 0.45) would be expelled in every round, which would leave nobody to train;
    none is, each such round says so, and the run completes."""
    run_dir = tmp_path / "expelled"
    taco = ["algorithm=taco", "train.local_steps=3", "algorithm.kappa=0.1", "algorithm.lam=1"]
    taco += ["algorithm.strike_all=true", "num_rounds=3", f"hydra.run.dir={run_dir}"]
    result = run_cli([*SIM, *taco], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = MetricsLog(run_dir / "metrics.csv").rows()
    assert [(r["flagged"], r["expelled"]) for r in rows] == [("2", "0")] * 3
    said = (run_dir / "logs" / "serverapp.log").read_text()
    for rnd in (1, 2, 3):
        assert f"round {rnd}: every client left (0, 1) would reach 1 strikes: none" in said


def test_compressed_updates_travel_in_the_bytes_their_encoding_promises(
    tmp_path: Path, cli_env
) -> None:
    """st at q = 1/100 both ways: the update blobs are below the analytic naive bits and near
    spec 2.9's Golomb count plus framing (positions are Golomb-Rice coded), a round's upload
    is far below the dense models it replaces, and after the first round (the whole model,
    first contact) the download is the broadcasts."""
    run_dir = tmp_path / "st"
    codecs = ["compression.up=st", "compression.up.q=0.01", "compression.down=st"]
    args = [*SIM, "num_rounds=3", *codecs, "compression.down.q=0.01"]
    result = run_cli([*args, f"hydra.run.dir={run_dir}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    model = load_checkpoint(run_dir / "checkpoint.npz").model
    dense = 2 * 4 * sum(v.size for v in model.values())  # two clients, float32
    rows = metrics_rows(run_dir)
    # per blob: the tensor count, a length and a kept count per tensor, and per tensor up to
    # two partly filled bytes (signs, positions)
    framing = 4 * (1 + 2 * len(model)) + 2 * len(model)
    for row in rows:
        golomb = int(row["update_bits_golomb"]) / 8
        assert int(row["update_bytes_up"]) < int(row["update_bits_naive"]) / 8
        assert 0.8 * golomb < int(row["update_bytes_up"]) < 1.2 * golomb + 2 * framing
        assert int(row["update_bytes_up"]) < int(row["bytes_up"]) < dense / 20
    assert int(rows[0]["bytes_down"]) > dense
    for row in rows[1:]:
        assert 2 * int(row["broadcast_bytes"]) < int(row["bytes_down"]) < dense / 20
    for row in rows:
        golomb = int(row["broadcast_bits_golomb"]) / 8
        assert int(row["broadcast_bytes"]) < int(row["broadcast_bits_naive"]) / 8
        assert 0.8 * golomb < int(row["broadcast_bytes"]) < 1.2 * golomb + framing
    assert float(rows[-1]["test_accuracy"]) > 0.1


def test_stragglers_are_the_same_for_every_algorithm(tmp_path: Path, cli_env) -> None:
    """Budgets drawn per (seed, round, client): FedAvg drops incomplete clients, FedProx trains
    them for their budget; both meet the same stragglers."""
    args = [*SIM, "num_clients=4", "num_rounds=3", "train.local_steps=6"]
    args += ["stragglers.incomplete=0.5", "stragglers.inactive=0.25"]
    rows = {}
    for algorithm in ("fedavg", "fedprox"):
        run_dir = tmp_path / algorithm
        result = run_cli([*args, f"algorithm={algorithm}", f"hydra.run.dir={run_dir}"], cli_env)
        assert result.returncode == 0, result.stderr[-3000:]
        rows[algorithm] = metrics_rows(run_dir)
    for avg, prox in zip(rows["fedavg"], rows["fedprox"], strict=True):
        budgets = [int(avg[f"budget_{p}"]) for p in range(4)]
        assert budgets == [int(prox[f"budget_{p}"]) for p in range(4)]
        complete, active = budgets.count(6), sum(b > 0 for b in budgets)
        assert int(avg["participants"]) == complete
        assert int(prox["participants"]) == active
        assert int(avg["dropped_incomplete"]) == int(avg["incomplete"]) == active - complete
        assert int(prox["dropped_incomplete"]) == 0
    every_budget = [int(r[f"budget_{p}"]) for r in rows["fedprox"] for p in range(4)]
    assert 0 in every_budget and any(0 < b < 6 for b in every_budget)  # both kinds occurred


def test_clients_score_the_global_and_their_local_models_on_their_own_test_split(
    tmp_path: Path, cli_env
) -> None:
    """client_eval: every client scores the global model on its held-out 20 %, each trainer
    its own model after local steps; the last round's mean equals scoring the checkpointed
    global model on every client's local test split here. On the way: EFL with lambda = 0
    (no stragglers, no compression) is FedAvg bitwise."""
    args = [*SIM, "num_clients=3", "num_rounds=2", "client_eval.enabled=true"]
    for name, algorithm in (("fedavg", ["algorithm=fedavg"]), ("efl", ["algorithm=efl"])):
        lam = ["algorithm.lam=0"] if name == "efl" else []
        result = run_cli([*args, *algorithm, *lam, f"hydra.run.dir={tmp_path / name}"], cli_env)
        assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "efl"
    fedavg = load_checkpoint(tmp_path / "fedavg" / "checkpoint.npz").model
    for key, value in load_checkpoint(run_dir / "checkpoint.npz").model.items():
        assert np.array_equal(value, fedavg[key]), key
    rows = metrics_rows(run_dir)
    for efl_row, fedavg_row in zip(rows, metrics_rows(tmp_path / "fedavg"), strict=True):
        for column in ("train_loss", "test_accuracy", "client_acc_global", "client_acc_local"):
            assert efl_row[column] == fedavg_row[column]
    for row in rows:
        assert int(row["client_eval_clients"]) == 3
        assert 0 <= float(row["client_acc_global_worst10"]) <= float(row["client_acc_global"])
        assert 0 <= float(row["client_acc_local_worst10"]) <= float(row["client_acc_local"]) <= 1
        assert int(row["client_eval_bytes_down"]) > 0
    cfg = OmegaConf.load(run_dir / "config.yaml")
    model = build_model(cfg)
    model.load_state_dict(
        {
            k: torch.as_tensor(v)
            for k, v in load_checkpoint(run_dir / "checkpoint.npz").model.items()
        }
    )
    scores = []
    for pid in range(3):
        node = NodeIdentity(partition_id=pid, num_partitions=3, cache_dir=str(tmp_path / "c"))
        x, y = local_test_data(cfg, node)
        train_x, _ = local_training_data(cfg, node)
        assert len(y) > 0 and abs(len(y) / (len(y) + len(train_x)) - 0.2) < 0.02
        scores.append(evaluate(model, x, y, device=torch.device("cpu"))[0])
    assert float(rows[-1]["client_acc_global"]) == pytest.approx(np.mean(scores), abs=1e-9)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["bmta_global"] == max(float(r["client_acc_global"]) for r in rows)
    assert summary["bmta_local"] == max(float(r["client_acc_local"]) for r in rows)


def test_fedcat_stopped_inside_a_cycle_and_resumed_ends_with_the_uninterrupted_model(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """k = 2 copies over 4 clients for 3 cycles. A target of 5 % stops the run after round 1,
    where the copies' average is what was scored; resumed without the target, the run ends
    with the same model and metrics as one that never stopped."""
    args = [
        *SIM,
        "num_clients=4",
        "algorithm=fedcat",
        "algorithm.k=2",
        "train.local_steps=3",
        "num_rounds=6",
    ]
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    result = run_cli([*args, f"hydra.run.dir={straight}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_cli([*args, "target_accuracy=0.05", f"hydra.run.dir={broken}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert load_checkpoint(broken / "checkpoint.npz").round == 1
    result = run_cli([*args, "resume=true", f"hydra.run.dir={broken}"], cli_env)
    assert result.returncode == 0, result.stderr[-3000:]

    a = load_checkpoint(straight / "checkpoint.npz")
    b = load_checkpoint(broken / "checkpoint.npz")
    assert a.round == b.round == 6
    for key in a.model:
        np.testing.assert_array_equal(a.model[key], b.model[key])
    rows = metrics_rows(straight)
    assert accuracy_history(broken) == accuracy_history(straight)
    assert [r["eval_model"] for r in rows] == ["copies_average", "global"] * 3
    assert [r["chain_pos"] for r in rows] == ["0", "1"] * 3
    for r in rows:  # two distinct partitions a round, one per copy
        assert len({r["copy_0"], r["copy_1"]}) == 2
    assert [[r["copy_0"], r["copy_1"]] for r in metrics_rows(broken)] == [
        [r["copy_0"], r["copy_1"]] for r in rows
    ]
    picks = json.loads((straight / "summary.json").read_text())["participation"]
    assert sum(picks.values()) == 12


def test_a_completed_run_removes_its_clients_state_unless_kept(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SCAFFOLD saves each client's c_i; once the run completes it goes, with
    keep_client_state=true it stays (a failed or interrupted run keeps it: the resume tests)."""
    state = tmp_path / "client-state"
    env = {**cli_env, "FL_STATE_DIR": str(state)}
    args = [*SIM, "algorithm=scaffold", "num_rounds=2"]
    for keep, run_dir in ((False, tmp_path / "gone"), (True, tmp_path / "kept")):
        extra = ["keep_client_state=true"] if keep else []
        result = run_cli([*args, *extra, f"hydra.run.dir={run_dir}"], env)
        assert result.returncode == 0, result.stderr[-3000:]
        saved = state / _run_id(run_dir)
        assert saved.exists() == keep
        if keep:
            assert sorted(p.name for p in saved.iterdir()) == ["partition-0", "partition-1"]
