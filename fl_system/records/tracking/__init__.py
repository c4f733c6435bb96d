"""Experiment tracking: MLflow, TensorBoard and W&B fed by the round driver, server side.

`tracking=mlflow` (or `tracking=[mlflow,tensorboard,wandb]`) puts one node per tracker under
`tracking` (conf/tracking/). fl-run checks the packages and fills in what only it knows (the
default MLflow store beside it, the sweep, the git commit); the ServerApp's round driver logs
through `session.TrackedRun`; clients never see a tracker. Each tracker's package is imported
only by the process that logs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.settings.value_checks import ConfigError

EXTRA = "pip install -e '.[tracking]'"
IMAGE_EXTRA = "build the image with EXTRAS=tracking (docker/README.md, Tracking)"
IMAGE_MARK = "FL_SYSTEM_IMAGE"  # set in docker/Dockerfile's image: pip does not apply there
SOURCE = Path(__file__).resolve().parents[3]  # the source tree (a git checkout, or not)


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
            how = IMAGE_EXTRA if os.environ.get(IMAGE_MARK) else EXTRA
            raise ConfigError(f"tracking={name} needs the {name} package: {how}")
    mode = trackers["wandb"].mode if "wandb" in trackers else "offline"
    if mode not in ("offline", "online"):
        raise ConfigError(f"tracking.wandb.mode must be offline or online, got {mode!r}")


def settle(
    cfg: DictConfig, *, started_in: Path, sweep: Path | None, job_overrides: Sequence[str] = ()
) -> None:
    """What fl-run fills in before the run starts: MLflow's default store (a SQLite file in
    the folder fl-run was started in, whatever folder the ServerApp runs in), the -m sweep's
    directory, the source's git commit, and a sweep member's label (what sets it apart)."""
    if not chosen(cfg):
        return
    with open_dict(cfg):
        if "mlflow" in chosen(cfg) and cfg.tracking.uri is None:
            cfg.tracking.uri = f"sqlite:///{started_in.resolve() / 'mlflow.db'}"
        cfg.tracking.sweep = str(sweep.resolve()) if sweep is not None else None
        cfg.tracking.commit = git_commit()
        cfg.tracking.label = (
            member_label(str(cfg.algorithm.name), _swept(sweep), job_overrides)
            if sweep is not None
            else None
        )


def member_label(algorithm: str, swept: Sequence[str], job_overrides: Sequence[str]) -> str:
    """A sweep member's name in the trackers: its algorithm and its values of the swept
    settings ("fedprox seed=2 train.lr=0.1"), not only Hydra's job number."""
    values = dict(o.split("=", 1) for o in job_overrides if "=" in o)
    shown = [f"{key}={values[key]}" for key in swept if key != "algorithm" and key in values]
    return " ".join([algorithm, *shown])


def _swept(sweep: Path) -> list[str]:
    """The keys the sweep varies, from the multirun.yaml Hydra wrote in its folder."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    saved = sweep / "multirun.yaml"
    if not saved.is_file():
        return []
    given = OmegaConf.select(OmegaConf.load(saved), "hydra.overrides.task") or []
    parsed = OverridesParser.create().parse_overrides([str(o) for o in given])
    return [o.key_or_group for o in parsed if o.is_sweep_override()]


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
