"""The experiment's model, the zoo's or one's own `torch.nn.Module`, built and checked.

`model=custom model._target_=pkg.module.Class` (or a factory function) names any module; its
other keys under `model.` are its keyword arguments, and it is given the task's
`input_shape` and `num_classes` when its signature asks for them (a model for
`task=regression` has one output). `model.feature_layer` and `model.source` are fl_system's
(the child whose output MOON contrasts; the file or folder the model's code is in), never
the constructor's. Before any node trains, fl-run builds the model once and runs one forward
pass on a zero batch (`check_model`): an import, an argument, a forward pass or an output
size that does not fit stops the run with one line.
"""

from __future__ import annotations

import importlib
import inspect
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from fl_system.flower import fab_manifest
from fl_system.learning.app_supplied import model_from_app
from fl_system.learning.model_parts import child_names, forward_parts, has_feature_split
from fl_system.learning.seeding import torch_seeded
from fl_system.settings.value_checks import ConfigError

OURS = ("name", "feature_layer", "source")  # model keys that are not constructor arguments
TASK_ARGUMENTS = ("input_shape", "num_classes")
SHIPPED = "shipped_model"  # the app's folder that carries model.source's code to the nodes


def instantiate_model(node: DictConfig, input_shape: Any, num_classes: Any) -> nn.Module:
    """The model `node` (the config's `model` group) describes, built once."""
    params = OmegaConf.to_container(node, resolve=True)
    assert isinstance(params, dict)
    target = params.pop("_target_", None)
    if not isinstance(target, str) or not target or target == "???":
        raise ConfigError(
            "model=custom needs the model's class or factory: model._target_=pkg.module.Class"
        )
    source = params.get("source")
    zoo = params.get("name") not in (None, "custom")  # a shipped model names itself
    for key in OURS:
        params.pop(key, None)
    build = locate(target, source)
    accepted = _arguments(build)
    for key, value in zip(TASK_ARGUMENTS, (input_shape, num_classes), strict=True):
        if key not in params and (accepted is None or key in accepted):
            params[key] = list(value) if key == "input_shape" and value is not None else value
    if accepted is not None:
        unknown = [k for k in params if k not in accepted]
        if unknown:
            raise ConfigError(
                f"model.{unknown[0]} is not an argument of {target}{inspect.signature(build)}"
            )
    try:
        model = build(**params)
    except Exception as err:  # the user's constructor: any exception is its message
        if zoo:  # its own message names the model and the way out
            raise ConfigError(f"{node.name}: {err}") from None
        raise ConfigError(f"model._target_={target}: building it failed: {_said(err)}") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"model._target_={target} gave a {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def locate(target: str, source: str | None = None) -> Callable[..., Any]:
    """The class or function `pkg.module.Name`, imported; with `model.source`, from the copy
    the app carries (a node running the app's FAB) or else from `source` itself."""
    if source:
        for folder in [source_folder(source), *shipped_folders()]:  # the last inserted wins
            if folder.is_dir() and str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
    module_name, _, attribute = target.rpartition(".")
    if not module_name:
        raise ConfigError(f"model._target_={target}: give a module path, e.g. mymodels.{target}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        where = f"{source} and " if source else ""
        raise ConfigError(
            f"model._target_={target}: cannot import {module_name} ({err}); looked in "
            f"{where}the installed packages: install it on every node (pip install), or name "
            f"its file with model.source=path/to/{module_name.split('.')[0]}.py"
        ) from None
    except Exception as err:  # importing the user's module ran its code
        raise ConfigError(
            f"model._target_={target}: importing {module_name} failed: {_said(err)}"
        ) from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise ConfigError(
            f"model._target_={target}: {module_name} has no class or function {attribute}"
        )
    return found


def source_folder(source: str) -> Path:
    """The folder `model.source` puts on the import path: a file's, or the folder itself."""
    path = Path(source).expanduser().resolve()
    return path.parent if path.is_file() else path


def shipped_folders() -> list[Path]:
    """The app's copies of `model.source` on the import path: Flower puts an installed FAB's
    folder there, and `ship_source` put the code in its SHIPPED folder."""
    return [
        Path(entry) / SHIPPED for entry in sys.path if entry and (Path(entry) / SHIPPED).is_dir()
    ]


def ship_source(source: str, app: Path) -> Path:
    """Copy `model.source` (a .py file, or a folder's contents) into the staged app's SHIPPED
    folder, which the FAB carries to every node."""
    path = Path(source).expanduser().resolve()
    dest = app / SHIPPED
    shutil.rmtree(dest, ignore_errors=True)
    if path.is_file():
        dest.mkdir(parents=True)
        shutil.copyfile(path, dest / path.name)
    else:
        shutil.copytree(path, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fab_manifest.include(app, f"{SHIPPED}/**/*.py")  # the FAB takes what fab-include names
    return dest


def check_model(
    model: nn.Module,
    input_shape: Sequence[int],
    outputs: int,
    *,
    feature_layer: str | int | None = None,
    needs_features: str | None = None,
    who: str = "the model",
) -> str:
    """Refuse a model that cannot train on the task (ConfigError, one line); else describe
    it in one line. `needs_features`: why the run's rule needs penultimate features."""
    name = type(model).__name__
    feature_layer = None if feature_layer is None else str(feature_layer)
    fixed = [(n, p.dtype) for n, p in model.named_parameters() if not p.dtype.is_floating_point]
    if fixed:
        raise ConfigError(
            f"model {name}: parameter {fixed[0][0]} is {fixed[0][1]}, not floating point: "
            "gradients and averaging need float parameters (keep integer "
            "state in buffers)"
        )
    shape = [2, *(int(v) for v in input_shape)]
    parts = forward_parts(feature_layer)
    if feature_layer is not None:
        try:
            model.get_submodule(feature_layer)
        except AttributeError:
            raise ConfigError(
                f"model.feature_layer={feature_layer}: {name} has no such child (its "
                f"children: {child_names(model)})"
            ) from None
    elif needs_features is not None and not has_feature_split(model):
        raise ConfigError(
            f"{who} {needs_features}; {name} has neither (its children: {child_names(model)})"
        )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out, _ = parts(model, torch.zeros(shape))
    except ConfigError:
        raise
    except Exception as err:  # the user's forward: any exception is its message
        raise ConfigError(
            f"model {name}: its forward fails on a batch of shape {shape} (the task's input "
            f"shape {shape[1:]}): {_said(err)}"
        ) from None
    finally:
        model.train(was_training)
    got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
    if got != [2, outputs]:
        raise ConfigError(
            f"model {name} returns {got} for a batch of 2; the task needs [2, {outputs}] "
            f"(logits: one per class of dataset.num_classes, or one value under task=regression)"
        )
    count = sum(p.numel() for p in model.parameters())
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    size += sum(b.numel() * b.element_size() for b in model.buffers())
    return f"model {name}: {count:,} parameters, {size / 1024:,.1f} KiB with its buffers"


def fingerprint(model: nn.Module) -> str:
    """What makes two models the same one: the class and every state entry's name, shape and
    dtype (JSON), compared at the handshake."""
    kind = type(model)
    layers = [[k, list(v.shape), str(v.dtype)] for k, v in model.state_dict().items()]
    return json.dumps({"class": f"{kind.__module__}.{kind.__qualname__}", "layers": layers})


def first_difference(ours: str, theirs: str) -> str | None:
    """How a node's model (`theirs`, a fingerprint) differs from the server's, first
    difference only; None when they are the same."""
    a, b = json.loads(ours), json.loads(theirs)
    if a["class"] != b["class"]:
        return f"its model is {b['class']}, the run's {a['class']}"
    mine = {name: (shape, dtype) for name, shape, dtype in a["layers"]}
    for name, shape, dtype in b["layers"]:
        if name not in mine:
            return f"its model has a layer {name} that the run's {a['class']} has not"
        if mine.pop(name) != (shape, dtype):
            want = dict((n, (s, d)) for n, s, d in a["layers"])[name]
            return f"layer {name} is {shape} {dtype} there, {want[0]} {want[1]} here"
    if mine:
        return f"its model lacks layer {next(iter(mine))} of {a['class']}"
    return None


def _arguments(build: Callable[..., Any]) -> set[str] | None:
    """The keyword arguments `build` takes (None: any, it has **kwargs)."""
    try:
        signature = inspect.signature(build)
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in signature.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return None
    return {
        n
        for n, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _said(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def build_model(cfg: DictConfig) -> nn.Module:
    """The initial global model (the zoo's or one's own, `own_model`): identical on every
    process for the same seed."""
    if model_from_app(cfg):
        raise ConfigError(
            "model=app: each node's ClientApp builds the model (client_app.make_client_app("
            "build_model=...)); give strategy.start the initial arrays of that model"
        )
    with torch_seeded(int(cfg.seed)):
        return instantiate_model(
            cfg.model, cfg.dataset.get("input_shape"), cfg.dataset.get("num_classes")
        )
