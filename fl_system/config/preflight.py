"""Everything that can be checked before a process starts, so bad input fails fast and clean."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from fl_system.config.compose import default_config
from fl_system.config.experiment import (
    build_client_addons,
    build_compression,
    build_strategy,
    central_test_set,
)
from fl_system.config.resume import check_same_experiment, defaults_line
from fl_system.config.validation import check_values
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.data.node_data import Task, node_held
from fl_system.data.node_data.schema import complete_task
from fl_system.learning import score
from fl_system.learning.lockstep import lockstep_problem
from fl_system.learning.own_model import build_model, check_model
from fl_system.privacy import check_privacy
from fl_system.privacy.secagg import check_secagg
from fl_system.records.checkpoint import load_checkpoint
from fl_system.records.run_dir import RunPaths
from fl_system.settings.config_nodes import build
from fl_system.settings.value_checks import ConfigError

if TYPE_CHECKING:
    import torch


def preflight(cfg: DictConfig, paths: RunPaths) -> None:
    """Every check that can run before the run starts, in the order fl-run runs them (fl-run
    checks the values before anything starts, the rest while a runtime that starts early
    comes up)."""
    check_values(cfg)
    check_parts(cfg)
    check_data(cfg, paths)


def check_parts(cfg: DictConfig) -> None:
    """Build every part once (strategy, local rule, add-ons, codecs, model): a component that
    rejects its arguments fails here, before any data is read."""
    _check_node_data(cfg)
    if node_held(cfg):  # the task first: the model's sizes come from it
        complete_task(cfg, say=lambda line: print(f"fl-run: {line}", flush=True))
        Task.from_config(cfg)
    strategy = build_strategy(cfg)
    _check_regression(cfg, strategy)
    check_privacy(cfg, strategy)
    check_secagg(cfg, strategy)
    _check_model_source(cfg)
    rule = build(cfg.algorithm.local_rule)
    build_client_addons(cfg)
    build_compression(cfg, "up")
    build_compression(cfg, "down")
    model = build_model(cfg)
    _check_lockstep(cfg, rule, model)
    described = check_model(
        model,
        cfg.dataset.input_shape,
        int(cfg.dataset.num_classes),
        feature_layer=cfg.model.get("feature_layer"),
        needs_features=getattr(rule, "needs_features", None),
        who=f"algorithm={cfg.algorithm.name}",
    )
    print(f"fl-run: {described}", flush=True)
    if cfg.dataset.get("augment"):
        build(cfg.dataset.augment, label="dataset.augment")


def _check_lockstep(cfg: DictConfig, rule: object, model: torch.nn.Module) -> None:
    """runtime.backend=vectorized takes plain SGD steps of many clients at once: a rule that
    changes each step, or a model whose output depends on its batch or on chance, trains on
    backend=process instead, and the run says so in one line."""
    if OmegaConf.select(cfg, "runtime.backend") != "vectorized":
        return
    steps_alone = getattr(rule, "steps_alone", None)
    hooks = steps_alone() if callable(steps_alone) else ()
    if hooks:
        why = f"its client rule {type(rule).__name__} changes every step ({', '.join(hooks)})"
    elif (problem := lockstep_problem(model)) is not None:
        why = f"the model has {problem}"
    else:
        return
    print(
        f"fl-run: runtime.backend=vectorized: algorithm={cfg.algorithm.name}: {why}, which "
        "clients in lockstep cannot take; its clients train on runtime.backend=process",
        flush=True,
    )
    cfg.runtime.backend = "process"


def _check_model_source(cfg: DictConfig) -> None:
    """model.source: a file or folder that exists, named absolutely for every process."""
    source = cfg.model.get("source")
    if not source:
        return
    path = Path(str(source)).expanduser().resolve()
    if not path.exists():
        raise ConfigError(f"model.source={source}: no such file or folder")
    cfg.model.source = str(path)


def _check_regression(cfg: DictConfig, strategy: object) -> None:
    """task=regression: data the nodes hold, and rules that need no class labels."""
    if not score.regression(cfg):
        return
    if not node_held(cfg):
        raise ConfigError(
            f"task=regression predicts a number from a table the nodes hold (dataset=table); "
            f"dataset={cfg.dataset.name} is a classification dataset"
        )
    for part in (strategy, *getattr(strategy, "addons", ())):
        reason = getattr(part, "classification_only", None)
        if reason is not None:
            raise ConfigError(
                f"algorithm={cfg.algorithm.name} cannot run task=regression: {reason}"
            )
    if OmegaConf.select(cfg, "client_eval.enabled"):
        raise ConfigError(
            "client_eval scores per-client accuracy, which task=regression has not; use "
            "evaluation=federated (mse, mae, r2 over the clients' test data)"
        )
    if cfg.clients.corrupt.ids and cfg.clients.corrupt.kind == "label_shift":
        raise ConfigError(
            "clients.corrupt.kind=label_shift shifts class labels: not under task=regression"
        )


def _check_node_data(cfg: DictConfig) -> None:
    """runtime.node_data: one path per node, for a dataset the nodes hold."""
    listed = OmegaConf.select(cfg, "runtime.node_data") or []
    if not listed:
        return
    if not node_held(cfg):
        raise ConfigError(
            f"runtime.node_data gives the nodes data of their own, but dataset={cfg.dataset.name} "
            "is partitioned from one source; use dataset=images|table|hf|npz"
        )
    if len(listed) != int(cfg.num_clients):
        raise ConfigError(
            f"runtime.node_data lists {len(listed)} paths for num_clients={cfg.num_clients}; "
            "give one path per node"
        )
    for i, path in enumerate(listed):
        if not Path(str(path)).expanduser().exists():
            raise ConfigError(f"runtime.node_data[{i}] (node {i}): {path}: no such file or folder")


def check_data(cfg: DictConfig, paths: RunPaths) -> None:
    """Load the dataset, partition it, and check the resume state of the run dir (fl-run
    runs this while a runtime that starts early comes up: a first load takes seconds).

    On resume, `cfg.run_id` becomes the checkpointed run's, so clients find their state.
    This is the one place a resumed config is compared with its checkpoint's: the ServerApp
    runs only configs that fl-run gives it, and the composed defaults are read from conf/.
    """
    central_test_set(cfg)
    if not node_held(cfg):
        load_dataset(cfg)
        partition_indices(cfg, cfg.num_clients)
    _check_resume(cfg, paths)


def _check_resume(cfg: DictConfig, paths: RunPaths) -> None:
    if cfg.resume:
        ckpt = load_checkpoint(paths.checkpoint)
        cfg.run_id = ckpt.config.get("run_id") or cfg.run_id
        current = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(current, dict)
        filled = check_same_experiment(ckpt.config, current, default_config(current))
        if filled:
            print(f"fl-run: {defaults_line(filled)}", flush=True)
        if ckpt.round >= cfg.num_rounds:
            raise ConfigError(
                f"the checkpoint is already at round {ckpt.round}; raise num_rounds "
                f"(now {cfg.num_rounds}) to continue"
            )
    elif paths.checkpoint.exists():
        raise ConfigError(
            f"{paths.root} already holds a run; pass resume=true to continue it "
            "or choose another hydra.run.dir"
        )
