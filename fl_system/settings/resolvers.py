"""Config resolvers the dataset group uses to derive the model's sizes from a declared task.

`${fl_outputs:${task},${dataset.classes}}` is the model's number of outputs: the number of
classes, or one under task=regression. `${fl_input_shape:...}` is the
model's input shape: a table's encoded row width when features are named (a numeric column
counts one, a categorical one its vocabulary), else [channels, H, W]. Registered on import
of `settings.config_nodes`, which every process that composes or resolves a config imports.
"""

from __future__ import annotations

from typing import Any

from omegaconf import ListConfig, OmegaConf


def _outputs(task: Any, classes: Any) -> int | None:
    if task == "regression":
        return 1
    return None if classes is None else len(classes)


def _input_shape(features: Any, channels: Any, image_size: Any) -> ListConfig | None:
    if features:
        width = sum(1 if isinstance(kind, str) else len(kind) for kind in features.values())
        return ListConfig([width])
    if channels is None or image_size is None:
        return None
    return ListConfig([int(channels), *(int(v) for v in image_size)])


def register() -> None:
    for name, function in (("fl_outputs", _outputs), ("fl_input_shape", _input_shape)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
