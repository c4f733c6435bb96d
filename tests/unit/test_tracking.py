"""Tracking's own rules: metric names, what a failing tracker costs, resume's catch-up,
tracking.json, the checks fl-run makes before anything starts."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from fl_system.config.compose import CONF_DIR, compose_experiment
from fl_system.records import tracking
from fl_system.records.run_log import RunLog, say, warning_line
from fl_system.records.tracking import record
from fl_system.records.tracking.base import RunInfo, Tracker, round_metrics, summary_scalars
from fl_system.records.tracking.receiver import Receiver
from fl_system.records.tracking.session import end_left_open
from fl_system.settings.value_checks import ConfigError

CALLS: list[tuple[str, str, Any]] = []  # (tracker, call, argument) of the fake trackers


class FakeTracker(Tracker):
    """Records its calls; `fail_at` makes log_round raise at that round."""

    def __init__(self, label: str, fail_at: int | None = None) -> None:
        self.label, self.fail_at = label, fail_at

    def start(self, run: RunInfo, previous: str | None, at: float) -> str:
        CALLS.append((self.label, "start", previous))
        return previous or f"{self.label}-id"

    def log_round(self, step: int, metrics: Mapping[str, float], at: float) -> None:
        if step == self.fail_at:
            raise ConnectionError(f"{self.label} store unreachable\nsecond line")
        CALLS.append((self.label, "round", step))

    def log_summary(self, summary: Mapping[str, Any], step: int, at: float) -> None:
        CALLS.append((self.label, "summary", step))

    def log_files(self, files: list[Path]) -> None:
        CALLS.append((self.label, "files", sorted(f.name for f in files)))

    def end(self, status: str, error: str | None, at: float) -> None:
        CALLS.append((self.label, "end", status))

    def mark_ended(
        self, run: RunInfo, run_id: str, status: str, error: str | None, at: float
    ) -> None:
        CALLS.append((self.label, "mark", (run_id, status, error)))


def _cfg(run_dir: Path, fail_at: int | None = None, resume: bool = False):
    cfg = compose_experiment(["dataset=digits", f"resume={str(resume).lower()}"])
    cfg = OmegaConf.to_container(cfg)
    target = f"{__name__}.FakeTracker"
    cfg["tracking"] = {
        "good": {"_target_": target, "label": "good"},
        "flaky": {"_target_": target, "label": "flaky", "fail_at": fail_at},
    }
    cfg["run_dir"] = str(run_dir)
    return OmegaConf.create(cfg)


def test_a_row_becomes_metrics_with_per_client_columns_under_a_prefix() -> None:
    row = {
        "round": 3,
        "test_accuracy": 0.5,
        "bytes_up": "1024",  # read back from metrics.csv
        "weight_0": 1e-300,
        "alpha_12": "1e300",
        "client_acc_global_worst10": 0.25,  # a name ending in digits, not a client's column
        "test_loss": "",  # not evaluated this round
        "diverged": True,
        "reasons": "timeout",
    }
    assert round_metrics(row) == {
        "test_accuracy": 0.5,
        "bytes_up": 1024.0,
        "client/weight_0": 1e-300,
        "client/alpha_12": 1e300,
        "client_acc_global_worst10": 0.25,
    }


def test_the_summary_keeps_its_finite_numbers_nested_ones_dotted() -> None:
    summary = {
        "final_accuracy": 0.9,
        "rounds_to_target": None,
        "bytes_up": 7,
        "dp": {"epsilon": 2.5, "delta": 1e-5},
        "expelled": [1, 2],
        "best": float("nan"),
        "note": "x",
    }
    assert summary_scalars(summary) == {
        "final_accuracy": 0.9,
        "bytes_up": 7.0,
        "dp.epsilon": 2.5,
        "dp.delta": 1e-5,
    }


def test_a_failing_tracker_is_one_warning_and_the_others_go_on(tmp_path: Path) -> None:
    CALLS.clear()
    said: list[str] = []
    run = Receiver(_cfg(tmp_path, fail_at=2), tmp_path, 0.0, say=said.append)
    for rnd in (1, 2, 3):
        run.log_round(rnd, {"test_accuracy": 0.1 * rnd}, float(rnd))
    run.finish({"final_accuracy": 0.3}, [str(tmp_path / "metrics.csv")], 4.0)
    assert said == [
        warning_line(
            "tracking=flaky failed (ConnectionError: flaky store unreachable); the run goes "
            "on without it, its files in the run directory are complete"
        )
    ]
    assert [c for c in CALLS if c[0] == "good"] == [
        ("good", "start", None),
        ("good", "round", 1),
        ("good", "round", 2),
        ("good", "round", 3),
        ("good", "summary", 3),
        ("good", "files", ["metrics.csv"]),
        ("good", "end", "finished"),
    ]
    assert [c for c in CALLS if c[0] == "flaky"] == [
        ("flaky", "start", None),
        ("flaky", "round", 1),
    ]
    saved = json.loads((tmp_path / record.FILE).read_text())
    assert saved == {
        "good": {"id": "good-id", "round": 3, "status": "finished"},
        "flaky": {"id": "flaky-id", "round": 1, "status": "running"},
    }


def test_resume_continues_each_tracked_run_with_the_rounds_it_lacks(tmp_path: Path) -> None:
    record.save(
        tmp_path,
        {"good": record.Entry("g-7", round=3), "flaky": record.Entry("f-7", round=2)},
    )
    CALLS.clear()
    run = Receiver(_cfg(tmp_path, resume=True), tmp_path, 0.0, say=pytest.fail)
    for rnd in (1, 2, 3, 4):  # the checkpoint's rounds again, then a new one
        run.log_round(rnd, {"test_accuracy": 0.5}, float(rnd))
    assert CALLS == [
        ("good", "start", "g-7"),
        ("flaky", "start", "f-7"),
        ("flaky", "round", 3),  # stopped between its checkpoint and its tracking
        ("good", "round", 4),
        ("flaky", "round", 4),
    ]


def test_fl_run_marks_what_a_stopped_server_left_open(tmp_path: Path) -> None:
    record.save(
        tmp_path,
        {"good": record.Entry("g-1", 4), "flaky": record.Entry("f-1", 4, status="finished")},
    )
    CALLS.clear()
    said: list[str] = []
    end_left_open(_cfg(tmp_path), tmp_path, "killed", "interrupted", say=said.append)
    assert CALLS == [("good", "mark", ("g-1", "killed", "interrupted"))]
    assert said == ["marking the run killed in good (its processes are gone)"]
    assert record.load(tmp_path)["good"].status == "killed"
    CALLS.clear()
    end_left_open(_cfg(tmp_path), tmp_path, "killed", "interrupted", say=pytest.fail)
    assert CALLS == []  # nothing left open


def test_an_unreadable_tracking_file_starts_new_tracked_runs(tmp_path: Path) -> None:
    (tmp_path / record.FILE).write_text("{not json")
    assert record.load(tmp_path) == {}
    assert record.load(tmp_path / "absent") == {}


def test_a_missing_tracker_package_names_the_extra(monkeypatch) -> None:
    cfg = compose_experiment(["tracking=[tensorboard,wandb]"])
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError) as err:
        tracking.check(cfg)
    assert str(err.value) == (
        "tracking=wandb needs the wandb package: pip install -e '.[tracking]'"
    )
    monkeypatch.setenv(tracking.IMAGE_MARK, "1")  # as in the project's image
    with pytest.raises(ConfigError, match="build the image with EXTRAS=tracking"):
        tracking.check(cfg)


def test_wandb_runs_offline_or_online_only() -> None:
    with pytest.raises(
        ConfigError, match=r"tracking\.wandb\.mode must be offline or online, got 'onlin'"
    ):
        compose_experiment(["tracking=wandb", "tracking.wandb.mode=onlin"])


def test_fl_run_puts_the_default_store_beside_it_and_names_the_sweep(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=["tracking=[mlflow,tensorboard]"])  # as fl-run has it
    tracking.settle(cfg, started_in=tmp_path, sweep=tmp_path / "multirun" / "x")
    assert cfg.tracking.uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert cfg.tracking.mlflow.uri == cfg.tracking.uri
    assert cfg.tracking.sweep == str(tmp_path / "multirun" / "x")
    untracked = OmegaConf.create(OmegaConf.to_container(compose_experiment([])))
    tracking.settle(untracked, started_in=tmp_path, sweep=None)
    assert "tracking" not in untracked


def test_the_git_commit_is_known_in_a_checkout_only(tmp_path: Path) -> None:
    assert tracking.git_commit(tmp_path) is None
    if (tracking.SOURCE / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", tracking.git_commit() or "")


def test_the_server_log_carries_warnings_to_fl_run(capsys) -> None:
    say(warning_line("tracking=mlflow failed (x)"))
    log = RunLog()
    log.feed(capsys.readouterr().out)
    assert log.warnings == ["tracking=mlflow failed (x)"]


def test_fl_run_ends_by_saying_where_each_tracker_shows_the_run(tmp_path: Path) -> None:
    cfg = _writable(["tracking=[mlflow,tensorboard,wandb]"])
    tracking.settle(cfg, started_in=tmp_path, sweep=None)
    run_dir = tmp_path / "outputs" / "run"
    assert tracking.where_to_look(cfg, run_dir) == [
        f"MLflow: mlflow ui --backend-store-uri sqlite:///{tmp_path / 'mlflow.db'}",
        f"TensorBoard: tensorboard --logdir {run_dir}",
        f"W&B: wandb sync {run_dir / 'wandb'}/offline-run-* (offline; uploads it)",
    ]
    served = _writable(["tracking=[mlflow,tensorboard]", "tracking.uri=http://h:5000"])
    tracking.settle(served, started_in=tmp_path, sweep=tmp_path / "multirun" / "x")
    assert tracking.where_to_look(served, run_dir) == [
        "MLflow: http://h:5000",
        f"TensorBoard: tensorboard --logdir {tmp_path / 'multirun' / 'x'}",  # every member
    ]
    assert tracking.where_to_look(compose_experiment([]), run_dir) == []


def _writable(overrides: list[str]):
    return OmegaConf.create(OmegaConf.to_container(compose_experiment(overrides)))


def test_a_sweep_member_is_named_by_its_algorithm_and_its_swept_values(tmp_path: Path) -> None:
    """The swept keys come from the multirun.yaml Hydra writes in the sweep's folder (a
    list value is not a sweep; a sweep of lists is)."""
    task = ["dataset=digits", "algorithm=fedavg,fedprox", "seed=0,1", "model.hidden=[8,8]"]
    task += ["train.lr=range(1,3)", "partition.alpha=[1,2],[3,4]"]
    OmegaConf.save({"hydra": {"overrides": {"task": task}}}, tmp_path / "multirun.yaml")
    cfg = _writable(["tracking=tensorboard", "algorithm=fedprox"])
    job = ["dataset=digits", "algorithm=fedprox", "seed=1", "model.hidden=[8,8]"]
    job += ["train.lr=2", "partition.alpha=[3,4]"]
    tracking.settle(cfg, started_in=tmp_path, sweep=tmp_path, job_overrides=job)
    assert cfg.tracking.label == "fedprox seed=1 train.lr=2 partition.alpha=[3,4]"
    single = _writable(["tracking=tensorboard"])
    tracking.settle(single, started_in=tmp_path, sweep=None, job_overrides=["seed=3"])
    assert single.tracking.label is None
