"""Config resolvers the dataset group uses to derive the model's sizes from a declared task.

`${fl_count:${dataset.classes}}` is the number of classes. `${fl_input_shape:...}` is the
model's input shape: a table's encoded row width when features are named (a numeric column
counts one, a categorical one its vocabulary), else [channels, H, W]. Registered on import
of `fl_system.config_nodes`, which every process that composes or resolves a config imports.
"""

from __future__ import annotations

from typing import Any

from omegaconf import ListConfig, OmegaConf


def _count(values: Any) -> int | None:
    return None if values is None else len(values)


def _input_shape(features: Any, channels: Any, image_size: Any) -> ListConfig | None:
    if features:
        width = sum(1 if isinstance(kind, str) else len(kind) for kind in features.values())
        return ListConfig([width])
    if channels is None or image_size is None:
        return None
    return ListConfig([int(channels), *(int(v) for v in image_size)])


def register() -> None:
    for name, function in (("fl_count", _count), ("fl_input_shape", _input_shape)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
