"""Experiment tracking: MLflow, TensorBoard and W&B fed by the round driver, server side.

`tracking=mlflow` (or `tracking=[mlflow,tensorboard,wandb]`) puts one node per tracker under
`tracking` (conf/tracking/). fl-run checks the packages and fills in what only it knows (the
default MLflow store beside it, the sweep, the git commit); the ServerApp's round driver logs
through `session.TrackedRun`; clients never see a tracker. Each tracker's package is imported
only by the process that logs.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.value_checks import ConfigError

EXTRA = "pip install -e '.[tracking]'"
SOURCE = Path(__file__).resolve().parents[2]  # the source tree (a git checkout, or not)


def chosen(cfg: DictConfig) -> dict[str, DictConfig]:
    """{tracker name: its config node} of the trackers the run logs to (its option names)."""
    node = OmegaConf.select(cfg, "tracking")
    if not isinstance(node, DictConfig):
        return {}
    return {
        str(name): sub
        for name, sub in node.items()
        if isinstance(sub, DictConfig) and "_target_" in sub
    }


def check(cfg: DictConfig) -> None:
    """ConfigError naming the extra when a chosen tracker's package (its option's name) is
    missing, or naming a setting the tracker would refuse."""
    trackers = chosen(cfg)
    for name in trackers:
        if importlib.util.find_spec(name) is None:
            raise ConfigError(f"tracking={name} needs the {name} package: {EXTRA}")
    mode = trackers["wandb"].mode if "wandb" in trackers else "offline"
    if mode not in ("offline", "online"):
        raise ConfigError(f"tracking.wandb.mode must be offline or online, got {mode!r}")


def settle(cfg: DictConfig, *, started_in: Path, sweep: Path | None) -> None:
    """What fl-run fills in before the run starts: MLflow's default store (a SQLite file in
    the folder fl-run was started in, whatever folder the ServerApp runs in), the -m sweep's
    directory, and the source's git commit."""
    if not chosen(cfg):
        return
    with open_dict(cfg):
        if "mlflow" in chosen(cfg) and cfg.tracking.uri is None:
            cfg.tracking.uri = f"sqlite:///{started_in.resolve() / 'mlflow.db'}"
        cfg.tracking.sweep = str(sweep.resolve()) if sweep is not None else None
        cfg.tracking.commit = git_commit()


def where_to_look(cfg: DictConfig, run_dir: Path) -> list[str]:
    """The commands that show a finished run in each of its trackers (fl-run's last lines)."""
    trackers = chosen(cfg)
    sweep = OmegaConf.select(cfg, "tracking.sweep")
    lines = []
    if "mlflow" in trackers:
        uri = str(OmegaConf.select(cfg, "tracking.uri"))  # what `settle` filled in
        shown = f"mlflow ui --backend-store-uri {uri}" if uri.startswith("sqlite:") else uri
        lines.append(f"MLflow: {shown}")
    if "tensorboard" in trackers:  # a sweep's folder shows every member beside the others
        lines.append(f"TensorBoard: tensorboard --logdir {sweep or run_dir}")
    if "wandb" in trackers:
        node = trackers["wandb"]
        lines.append(
            f"W&B: wandb sync {run_dir / 'wandb'}/offline-run-* (offline; uploads it)"
            if node.mode == "offline"
            else f"W&B: project {node.project} at wandb.ai"
        )
    return lines


def git_commit(source: Path = SOURCE) -> str | None:
    """HEAD of the source tree, `-dirty` when it has uncommitted changes; None outside git."""
    if not (source / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
