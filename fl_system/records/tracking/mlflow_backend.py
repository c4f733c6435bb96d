"""MLflow: one MLflow run per fl_system run, through MlflowClient (no global active run, so a
sweep's members in one process never share state).

A -m sweep's members nest under one parent run named after the sweep (found by a tag, made by
the first member), in the experiment each member logs to. The parent runs while a member
does; as each member ends it gets the sweep's summary so far (its best configuration by mean
final accuracy, as fl-compare ranks them) and is finished, so it ends with the last member.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from fl_system.records.compare.runs import find_runs
from fl_system.records.compare.table import best_configuration
from fl_system.records.tracking.base import (
    FAILED,
    FINISHED,
    KILLED,
    RunInfo,
    Tracker,
    summary_scalars,
)
from fl_system.records.tracking.final_model import FinalModel

_STATUS = {FINISHED: "FINISHED", FAILED: "FAILED", KILLED: "KILLED"}
_SWEEP_TAG, _ROLE_TAG = "fl_system.sweep", "fl_system.role"
_BATCH = 100  # MLflow's limit of params (or tags) in one log_batch
_METRIC_BATCH = 1000
_VALUE_LENGTH = 6000  # MLflow's longest param value
_NOTE = "mlflow.note.content"  # the run's description in the UI
# MLflow 3 opens an experiment in the view its kind names: ours train models
_KIND, _TRAINING = "mlflow.experimentKind", "custom_model_development"
_SOURCE_COMMIT = "mlflow.source.git.commit"  # the UI's "Source" commit


class MlflowTracker(Tracker):
    def __init__(self, uri: str, experiment: str | None = None, log_model: bool = True) -> None:
        # An unreachable server fails in seconds, not after MLflow's default ~2 min of retries
        # (the run goes on without it); the environment still overrides both.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        self.uri = uri
        self.experiment = experiment
        self.keeps_models = bool(log_model)
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id: str | None = None
        self.sweep: tuple[str, Path] | None = None  # (its parent run, its folder)

    def start(self, run: RunInfo, previous: str | None, at: float) -> str:
        if previous is not None:  # resume: the same MLflow run, running again
            self.client.update_run(previous, status="RUNNING")
            self.run_id = previous
            return previous
        experiment_id = self._experiment(self.experiment or f"fl_system/{run.dataset}")
        tags = {**run.tags}
        if "git_commit" in tags:  # "-dirty" stays in our own tag
            tags[_SOURCE_COMMIT] = tags["git_commit"].removesuffix("-dirty")
        if run.sweep is not None:
            tags[_SWEEP_TAG] = run.sweep
            parent = self._sweep_parent(experiment_id, run, at)
            tags["mlflow.parentRunId"] = parent
            self.sweep = parent, Path(run.sweep)
        created = self.client.create_run(
            experiment_id, start_time=_ms(at), run_name=run.name, tags=tags
        )
        self.run_id = created.info.run_id
        params = [Param(k, str(v)[:_VALUE_LENGTH]) for k, v in run.params.items()]
        for at in range(0, len(params), _BATCH):
            self.client.log_batch(self.run_id, params=params[at : at + _BATCH])
        return self.run_id

    def log_round(self, step: int, metrics: Mapping[str, float], at: float) -> None:
        batch = [Metric(k, v, _ms(at), step) for k, v in metrics.items()]
        for at in range(0, len(batch), _METRIC_BATCH):
            self.client.log_batch(self._id, metrics=batch[at : at + _METRIC_BATCH])

    def log_summary(self, summary: Mapping[str, Any], step: int, at: float) -> None:
        scalars = summary_scalars(summary).items()
        batch = [Metric(f"summary.{k}", v, _ms(at), step) for k, v in scalars]
        for at in range(0, len(batch), _METRIC_BATCH):
            self.client.log_batch(self._id, metrics=batch[at : at + _METRIC_BATCH])

    def log_files(self, files: list[Path]) -> None:
        for path in files:
            self.client.log_artifact(self._id, str(path))

    def log_model(self, model: FinalModel, at: float) -> None:
        """An MLflow model (MLflow's PyTorch flavor, a traced graph: serving it needs torch,
        not fl_system) with its signature and input example, linked to the run."""
        import mlflow
        import mlflow.pytorch
        import torch
        from mlflow.models import infer_signature

        with torch.no_grad():
            output = model.module(torch.from_numpy(model.example)).numpy()
        # this process logs one run at a time; the model goes to the run's experiment (MLflow
        # files it under the active one, else under Default)
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_experiment(experiment_id=self.client.get_run(self._id).info.experiment_id)
        mlflow.pytorch.log_model(
            model.module,
            name="model",
            signature=infer_signature(model.example, output),
            input_example=model.example,
            pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"],
            run_id=self._id,
        )

    def end(self, status: str, error: str | None, at: float) -> None:
        self._close(self._id, status, error, at)
        if self.sweep is not None:
            self._sweep_ended(*self.sweep, at)

    def mark_ended(
        self, run: RunInfo, run_id: str, status: str, error: str | None, at: float
    ) -> None:
        self._close(run_id, status, error, at)

    # -------------------------------------------------------------------------------------
    @property
    def _id(self) -> str:
        assert self.run_id is not None, "start() first"
        return self.run_id

    def _close(self, run_id: str, status: str, error: str | None, at: float) -> None:
        if error:
            self.client.log_batch(
                run_id, tags=[RunTag("error", error[:_VALUE_LENGTH]), RunTag(_NOTE, error)]
            )
        self.client.set_terminated(run_id, status=_STATUS[status], end_time=_ms(at))

    def _experiment(self, name: str) -> str:
        """The experiment's id, made if new; its kind set if it has none (a user's stays)."""
        found = self.client.get_experiment_by_name(name)
        if found is not None and _KIND in found.tags:
            return found.experiment_id
        if found is None:
            made = self.client.create_experiment(name, artifact_location=self._artifacts(name))
        else:
            made = found.experiment_id
        self.client.set_experiment_tag(made, _KIND, _TRAINING)
        return made

    def _artifacts(self, experiment: str) -> str | None:
        """Beside a SQLite store (MLflow's default is ./mlruns of whichever folder the
        ServerApp runs in); a tracking server keeps its own."""
        if not self.uri.startswith("sqlite:///"):
            return None
        store = Path(self.uri.removeprefix("sqlite:///"))
        return (store.parent / "mlartifacts" / experiment.replace("/", "_")).as_uri()

    def _sweep_parent(self, experiment_id: str, run: RunInfo, at: float) -> str:
        """The sweep's parent run in this experiment: made by its first member, running
        again while a member runs."""
        sweep = str(run.sweep)
        key = hashlib.sha1(sweep.encode()).hexdigest()[:16]
        found = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{_ROLE_TAG}` = 'sweep' and tags.`{_SWEEP_TAG}.key` = '{key}'",
            max_results=1,
        )
        if found:
            self.client.update_run(found[0].info.run_id, status="RUNNING")
            return found[0].info.run_id
        parent = self.client.create_run(
            experiment_id,
            start_time=_ms(at),
            run_name=f"sweep {run.sweep_label}",
            tags={_ROLE_TAG: "sweep", _SWEEP_TAG: sweep, f"{_SWEEP_TAG}.key": key},
        )
        return parent.info.run_id

    def _sweep_ended(self, parent: str, folder: Path, at: float) -> None:
        """A member ended: the sweep's summary so far (its best configuration, as fl-compare
        ranks them) on the parent run, which is finished until another member starts."""
        best = best_configuration(find_runs([folder])[0])
        if best is not None:
            name, figures = best
            batch = [
                Metric(k, v, _ms(at), int(figures["runs_finished"])) for k, v in figures.items()
            ]
            self.client.log_batch(parent, metrics=batch, tags=[RunTag("best_configuration", name)])
        self.client.set_terminated(parent, status="FINISHED", end_time=_ms(at))


def _ms(at: float) -> int:
    """MLflow's timestamps: milliseconds since the epoch."""
    return int(at * 1000)
