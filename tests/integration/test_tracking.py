"""Tracking against the real packages: a 3 x 3 sweep logged to MLflow (SQLite store),
TensorBoard and W&B (offline), read back with each one's own reader, grouped, and compared by
fl-compare; a tracking server that cannot be reached; a tracker whose package is missing.
(A killed and resumed tracked run: test_simulation.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import mlflow.pyfunc
import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from fl_system.learning.own_model import build_model
from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.results import read_rows
from fl_system.runtime.launch.ports import free_port
from tests.integration.conftest import QUICK, interrupt_when, run_cli, run_sweep
from tests.integration.tracked import (
    ids,
    mlflow_run,
    mlflow_steps,
    tensorboard,
    tensorboard_texts,
    wandb_runs,
)

pytestmark = pytest.mark.integration

ALGORITHMS = ("fedavg", "fedprox", "scaffold")
SEEDS = (0, 1, 2)
ROUNDS = 3
ARGS = [*QUICK, "runtime=simulation", f"num_rounds={ROUNDS}"]
EVERY_TRACKER = "tracking=[mlflow,tensorboard,wandb]"
STOPPED = "its ServerApp process ended before the run did"
CLIENT_EVAL = (
    "client_acc_global",
    "client_acc_global_worst10",
    "client_acc_local",
    "client_acc_local_worst10",
)


def test_a_tracked_sweep_is_logged_grouped_and_compared(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Nine members, each logged alike to the three trackers (every metrics.csv column per
    round, params, tags, summary, files, status), grouped by sweep in each; fl-compare's
    table holds the means of the nine summary.json files and its plot is a PNG."""
    sweep_dir, store = tmp_path / "sweep", tmp_path / "mlflow.db"
    sweep = [*ARGS, EVERY_TRACKER, f"tracking.uri=sqlite:///{store}", "tracking.log_model=false"]
    sweep += [f"algorithm={','.join(ALGORITHMS)}", f"seed={','.join(map(str, SEEDS))}"]
    began = time.time()
    members = run_sweep(sweep, sweep_dir, cli_env)
    ended = time.time()
    assert len(members) == len(ALGORITHMS) * len(SEEDS)

    client = MlflowClient(f"sqlite:///{store}")
    experiment = client.get_experiment_by_name("fl_system/digits")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("fl_system.role") == "sweep"]
    assert len(parents) == 1 and parents[0].data.tags["fl_system.sweep"] == str(sweep_dir)
    nested = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert sorted(r.info.run_name for r in nested) == sorted(map(_label, members))
    _assert_sweep_parent(parents[0], nested, members)
    for member in members:
        _assert_mlflow(member, store)
        _assert_tensorboard(member)
        _assert_wandb(member, group=f"{tmp_path.name}/sweep")
        _assert_timed(member, store, began, ended)
    _assert_compared(sweep_dir, members, tmp_path)


def _assert_sweep_parent(parent, nested: list, members: list[Path]) -> None:
    """Finished with its last member, the best configuration by mean final accuracy over
    the seeds (from each member's summary.json) as its metrics."""
    info = parent.info
    assert info.status == "FINISHED"
    assert info.start_time <= min(r.info.start_time for r in nested)
    assert info.end_time == max(r.info.end_time for r in nested)
    finals: dict[str, list[float]] = {}
    for member in members:
        name = OmegaConf.load(member / "config.yaml").algorithm.name
        finals.setdefault(name, []).append(
            json.loads((member / "summary.json").read_text())["final_accuracy"]
        )
    best = max(finals, key=lambda name: sum(finals[name]) / len(finals[name]))
    assert f"algorithm.name={best}" in parent.data.tags["best_configuration"].split()
    metrics = parent.data.metrics
    assert metrics["best_final_accuracy_mean"] == pytest.approx(
        sum(finals[best]) / len(finals[best]), abs=1e-12
    )
    assert (metrics["best_seeds"], metrics["configurations"]) == (len(SEEDS), len(ALGORITHMS))
    assert metrics["runs_finished"] == len(members)


def _label(member: Path) -> str:
    """What sets a member apart, its name in the trackers: "fedprox seed=2"."""
    config = OmegaConf.load(member / "config.yaml")
    return f"{config.algorithm.name} seed={config.seed}"


def _logged_columns(member: Path) -> dict[str, list[float]]:
    """metrics.csv's numeric columns, as every tracker names them (per-client under client/)."""
    rows = read_rows(member / "metrics.csv")
    assert [r["round"] for r in rows] == [str(r) for r in range(1, ROUNDS + 1)]
    columns = {}
    for key in rows[0]:
        if key != "round" and all(r[key] != "" for r in rows):
            name = f"client/{key}" if key in ("weight_0", "weight_1") else key
            columns[name] = [float(r[key]) for r in rows]
    assert {"test_accuracy", "bytes_up", "client/weight_0"} <= set(columns)
    return columns


def _assert_mlflow(member: Path, store: Path) -> None:
    client, run = mlflow_run(store, member)
    config = OmegaConf.load(member / "config.yaml")
    summary = json.loads((member / "summary.json").read_text())
    assert run.info.status == "FINISHED" and run.info.run_name == _label(member)
    for key, values in _logged_columns(member).items():
        history = client.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == list(range(1, ROUNDS + 1)), key
        assert [m.value for m in history] == pytest.approx(values, rel=1e-12), key
    assert mlflow_steps(client, run, "summary.final_accuracy") == [ROUNDS]
    assert run.data.metrics["summary.final_accuracy"] == summary["final_accuracy"]
    params = run.data.params
    assert params["algorithm.name"] == config.algorithm.name
    assert params["seed"] == str(config.seed) and params["train.lr"] == str(config.train.lr)
    tags = run.data.tags
    assert (tags["algorithm"], tags["dataset"], tags["runtime"], tags["seed"]) == (
        config.algorithm.name,
        "digits",
        "simulation",
        str(config.seed),
    )
    assert tags["run_id"] == config.run_id
    assert tags["mlflow.source.git.commit"] == tags["git_commit"].removesuffix("-dirty")
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    files = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert files == {"config.yaml", "curve.png", "metrics.csv", "summary.json"}
    assert not run.outputs.model_outputs  # tracking.log_model=false


def _assert_tensorboard(member: Path) -> None:
    events = tensorboard(member)
    for key, values in _logged_columns(member).items():
        scalars = events.Scalars(key)
        assert [e.step for e in scalars] == list(range(1, ROUNDS + 1)), key
        assert [e.value for e in scalars] == pytest.approx(values, rel=1e-6), key  # float32
    summary = json.loads((member / "summary.json").read_text())
    final = events.Scalars("summary/final_accuracy")
    assert [e.step for e in final] == [ROUNDS]
    assert final[0].value == pytest.approx(summary["final_accuracy"], rel=1e-6)
    assert tensorboard_texts(events, "status") == ["finished"]
    name = OmegaConf.load(member / "config.yaml").algorithm.name
    assert f"- algorithm: {name}" in tensorboard_texts(events, "tags")[0]


def _assert_wandb(member: Path, group: str) -> None:
    (run,) = wandb_runs(member)
    assert run.run_id == OmegaConf.load(member / "config.yaml").run_id and run.group == group
    assert sorted(run.history) == list(range(1, ROUNDS + 1))
    for key, values in _logged_columns(member).items():
        assert [run.history[s][key] for s in sorted(run.history)] == pytest.approx(values), key
    summary = json.loads((member / "summary.json").read_text())
    assert run.summary["summary/final_accuracy"] == summary["final_accuracy"]
    assert (run.exit_code, run.summary["status"]) == (0, "finished")


def _assert_timed(member: Path, store: Path, began: float, ended: float) -> None:
    """Each tracker holds the run's own times, whenever its process logged them (the first
    member's tracking process starts cold, seconds behind the run): the run spans its
    training, each round is stamped when it ended, as far apart as metrics.csv says."""
    client, run = mlflow_run(store, member)
    start, end = run.info.start_time / 1000, run.info.end_time / 1000
    rounds = [
        m.timestamp / 1000 for m in client.get_metric_history(run.info.run_id, "test_accuracy")
    ]
    trained = [float(r["wall_seconds"]) for r in read_rows(member / "metrics.csv")]
    assert began - 0.001 <= start <= rounds[0] and rounds[-1] <= end <= ended, member.name
    written = (member / "metrics.csv").stat().st_mtime  # when the last round's row was
    assert abs(rounds[-1] - written) < 0.5, (member.name, rounds[-1] - written)
    assert end - start >= trained[-1], (member.name, end - start, trained[-1])
    apart = [t - rounds[0] for t in rounds]
    assert apart == pytest.approx([w - trained[0] for w in trained], abs=0.5), member.name
    events = tensorboard(member)
    assert [e.wall_time for e in events.Scalars("test_accuracy")] == pytest.approx(rounds, abs=2e-3)
    (status,) = events.Tensors("status")
    assert status.wall_time == pytest.approx(end, abs=2e-3)
    (wandb,) = wandb_runs(member)
    assert [wandb.timestamps[s] for s in sorted(wandb.timestamps)] == pytest.approx(
        rounds, abs=2e-3
    )


def _assert_compared(sweep_dir: Path, members: list[Path], tmp_path: Path) -> None:
    """fl-compare's CSV against the means of the members' own summaries, by hand."""
    out, plot = tmp_path / "compared.csv", tmp_path / "compared.png"
    fl_compare = str(Path(sys.executable).parent / "fl-compare")
    done = subprocess.run(
        [fl_compare, str(sweep_dir), "--out", str(out), "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    by_hand: dict[str, dict[str, list[float]]] = {}
    for member in members:
        name = OmegaConf.load(member / "config.yaml").algorithm.name
        summary = json.loads((member / "summary.json").read_text())
        for key in ("final_accuracy", "best_accuracy"):
            by_hand.setdefault(name, {}).setdefault(key, []).append(summary[key])
    table = {r["algorithm.name"]: r for r in read_rows(out)}
    assert sorted(table) == sorted(ALGORITHMS)
    for name, values in by_hand.items():
        assert table[name]["seeds"] == "0 1 2" and table[name]["finished"] == "3"
        for key, seeds in values.items():
            assert float(table[name][f"{key}_mean"]) == pytest.approx(
                sum(seeds) / len(seeds), abs=1e-12
            )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(plot).ndim == 3  # a readable image, not only a header


def test_a_killed_tracked_run_shows_killed_and_its_resume_logs_each_round_once(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Ctrl-C mid-run: every tracker shows the run killed; `resume=true` continues the same
    tracked runs with only the rounds each lacks."""
    # 150 rounds of ~0.15 s (both clients sleep 0.01 s per local step, ~12 a round): the
    # interrupt, sent once the tracking process (~3 s to start, more under load) has a round,
    # lands mid-run; one epoch a round ended all 150 (3.3 s) before a loaded machine's
    # tracker had one
    rounds, run_dir, store = 150, tmp_path / "run", tmp_path / "mlflow.db"
    args = [*QUICK, "runtime=simulation", f"num_rounds={rounds}"]
    args += ["clients.slow.ids=[0,1]", "clients.slow.seconds_per_step=0.01"]
    args.append(EVERY_TRACKER)
    args += [f"tracking.uri=sqlite:///{store}", f"hydra.run.dir={run_dir}"]
    stopped = interrupt_when(
        args,
        cli_env,
        ready=lambda: len(read_rows(run_dir / "metrics.csv")) >= 3 and _tracked_a_round(run_dir),
        sig=signal.SIGINT,
    )
    assert stopped.returncode == 130, stopped.stderr
    assert load_checkpoint(run_dir / "checkpoint.npz").round < rounds
    killed = ids(run_dir)
    assert {t["status"] for t in killed.values()} == {"killed"}
    _, run = mlflow_run(store, run_dir)
    # closed by the tracking process, which holds the trackers, once its ServerApp was gone
    assert (run.info.status, run.data.tags["error"]) == ("KILLED", STOPPED)

    # resumed with num_rounds shortened to a few past the stop (a change resume takes), so
    # that the test does not train the ~140 rounds the interrupt left
    rounds = load_checkpoint(run_dir / "checkpoint.npz").round + 3
    resumed_at = time.time() * 1000
    result = run_cli([*args, f"num_rounds={rounds}", "resume=true"], cli_env, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    _assert_tracked_once(run_dir, store, killed, resumed_at, rounds)


def _assert_served_model(run, run_dir: Path, store: Path) -> None:
    """The final model, logged once as an MLflow model linked to the run, predicts as the
    checkpoint's weights do in the model the server builds; its signature is the input's."""
    (logged,) = run.outputs.model_outputs
    model_info = MlflowClient(f"sqlite:///{store}").get_logged_model(logged.model_id)
    assert model_info.experiment_id == run.info.experiment_id
    served = mlflow.pyfunc.load_model(model_info.artifact_location)  # no global tracking URI
    cfg = OmegaConf.load(run_dir / "config.yaml")
    shape = list(cfg.dataset.input_shape)
    batch = np.random.default_rng(0).random((5, *shape), dtype=np.float32)
    model = build_model(cfg)
    weights = load_checkpoint(run_dir / "checkpoint.npz").model
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
    with torch.no_grad():
        expected = model.eval()(torch.from_numpy(batch)).numpy()
    np.testing.assert_allclose(served.predict(batch), expected, rtol=1e-5, atol=1e-6)
    assert served.metadata.get_input_schema().inputs[0].shape[1:] == tuple(shape)


def _tracked_a_round(run_dir: Path) -> bool:
    try:
        return min(t["round"] for t in ids(run_dir).values()) >= 1
    except (OSError, ValueError):  # not written yet
        return False


def _assert_tracked_once(
    run_dir: Path, store: Path, killed: dict[str, dict], resumed_at: float, rounds: int
) -> None:
    """Each tracker continued its run: every round once, the resumed process sending only the
    rounds after those the tracker had (the checkpoint's, or one fewer if the stop fell
    between checkpoint and tracking)."""
    stopped_at = load_checkpoint(run_dir / "checkpoint.npz").round  # it ended: all rounds
    assert stopped_at == rounds
    client, run = mlflow_run(store, run_dir)
    assert run.info.run_id == killed["mlflow"]["id"] and run.info.status == "FINISHED"
    _assert_served_model(run, run_dir, store)
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    assert [m.step for m in history] == list(range(1, rounds + 1))
    later = [m.step for m in history if m.timestamp >= resumed_at]
    assert later == list(range(killed["mlflow"]["round"] + 1, rounds + 1))

    events = tensorboard(run_dir)
    assert [e.step for e in events.Scalars("test_accuracy")] == list(range(1, rounds + 1))
    assert tensorboard_texts(events, "status") == [f"killed: {STOPPED}", "finished"]

    # offline, each run of the tracking process writes its own files of the one W&B run
    # (`wandb sync` joins them): the interrupted run's and the resumed run's
    interrupted, resumed = wandb_runs(run_dir)
    assert {interrupted.run_id, resumed.run_id} == {killed["wandb"]["id"]}
    assert sorted(interrupted.history) == list(range(1, killed["wandb"]["round"] + 1))
    assert (interrupted.exit_code, interrupted.summary["status"]) == (130, "killed")
    assert sorted(resumed.history) == list(range(killed["wandb"]["round"] + 1, rounds + 1))
    assert (resumed.exit_code, resumed.summary["status"]) == (0, "finished")


def test_a_tracker_that_cannot_be_reached_warns_once_and_the_run_completes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A closed port as MLflow's server: one warning naming it, the run and its files
    complete, the other tracker unaffected (and given the per-client evaluation too)."""
    run_dir, port = tmp_path / "run", free_port()
    cli_env = {**cli_env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}  # refused at once, not thrice
    result = run_cli(
        [
            *ARGS,
            "tracking=[mlflow,tensorboard]",
            f"tracking.uri=http://127.0.0.1:{port}",
            "client_eval.enabled=true",
            f"hydra.run.dir={run_dir}",
        ],
        cli_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1, result.stderr
    assert "tracking=mlflow failed" in warnings[0] and f"127.0.0.1:{port}" in warnings[0]
    assert "the run goes on without it" in warnings[0]
    assert len(read_rows(run_dir / "metrics.csv")) == ROUNDS
    assert (run_dir / "summary.json").is_file() and (run_dir / "curve.png").is_file()
    assert set(ids(run_dir)) == {"tensorboard"}
    events, rows = tensorboard(run_dir), read_rows(run_dir / "metrics.csv")
    for key in ("test_accuracy", *CLIENT_EVAL):  # the per-client evaluation's columns too
        expected = [(int(r["round"]), pytest.approx(float(r[key]), rel=1e-6)) for r in rows]
        assert [(e.step, e.value) for e in events.Scalars(key)] == expected, key


def test_a_tracker_whose_package_is_missing_is_one_line_before_anything_starts(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """fl-run where `import wandb` fails, as without the extra: exit 2, one line naming it."""
    run_dir = tmp_path / "run"
    without_wandb = (
        "import sys; sys.modules['wandb'] = None; from fl_system.cli import main; main()"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            without_wandb,
            *ARGS,
            "tracking=[tensorboard,wandb]",
            f"hydra.run.dir={run_dir}",
        ],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "fl-run: error: tracking=wandb needs the wandb package: pip install -e '.[tracking]'"
    ]
    assert not run_dir.exists() and not (tmp_path / "mlflow.db").exists()
