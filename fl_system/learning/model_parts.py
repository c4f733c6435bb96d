"""A model's logits and, for the rules that contrast them, its penultimate features.

Any `torch.nn.Module` whose forward returns logits trains under every rule that only needs
the loss. A rule that needs the penultimate features (MOON) takes them from the model's own
`features` and `classifier` children when it has both (the zoo's models do: logits are
`classifier(features(x))`, computed once), or from the child that `model.feature_layer`
names: a forward hook keeps that child's output (flattened per example) while the model's
own forward runs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Parts = Callable[[nn.Module, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]


def has_feature_split(model: nn.Module) -> bool:
    """Whether the model exposes `features` and `classifier` modules (the zoo's split)."""
    return isinstance(getattr(model, "features", None), nn.Module) and isinstance(
        getattr(model, "classifier", None), nn.Module
    )


def forward_parts(feature_layer: str | int | None = None) -> Parts:
    """`parts(model, x) -> (logits, features)`: features None when the model offers none.
    (A Sequential's children are numbered: `model.feature_layer=2` reads as an int.)"""
    layer = None if feature_layer is None else str(feature_layer)

    def parts(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if layer is not None:
            return _hooked(model, x, layer)
        if has_feature_split(model):
            features = model.features(x)
            return model.classifier(features), features
        return model(x), None

    return parts


def _hooked(model: nn.Module, x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    layer = model.get_submodule(name)
    seen: list[torch.Tensor] = []
    handle = layer.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        logits = model(x)
    finally:
        handle.remove()
    if len(seen) != 1 or not isinstance(seen[0], torch.Tensor):
        raise ValueError(
            f"model.feature_layer={name} ran {len(seen)} times in one forward pass (or gave "
            "no tensor): name a child that runs once and returns the penultimate activations"
        )
    return logits, seen[0].flatten(1)


def child_names(model: nn.Module, most: int = 12) -> str:
    """The model's named submodules, for messages that ask the user to pick one."""
    names = [name for name, _ in model.named_modules() if name]
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")
