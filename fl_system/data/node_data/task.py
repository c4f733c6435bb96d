"""The task a federation of node-held data learns, declared once by the experiment.

The server cannot look at the nodes' data, so the experiment says what it must be: the label
vocabulary (its order is the model's output order), the image size and channels every image
is converted to, the feature columns of a table and their types, and how inputs are
normalised. Every node turns what it holds into arrays of exactly that shape; the handshake
compares what it holds with this before round 1 (`report.mismatches`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system.settings.value_checks import ConfigError

KINDS = ("images", "table", "hf", "npz")
TASKS = ("classification", "regression")
NUMERIC = ("float", "int")
NORMALIZE = ("fixed", "federated")
ON_BAD_RECORD = ("stop", "skip")


@dataclass(frozen=True)
class Feature:
    """A table column the model reads: numeric (`float`, `int`) or categorical (its
    vocabulary, one-hot encoded in this order)."""

    name: str
    type: str  # "float" | "int" | "category"
    categories: tuple[str, ...] = ()

    @property
    def width(self) -> int:
        return len(self.categories) if self.type == "category" else 1


@dataclass(frozen=True)
class Task:
    """What every node's data must become (Parameters: the `dataset` group's keys).

    Parameters
    ----------
    kind : str
        How nodes hold their data by default: images, table, hf or npz (a node may hold
        another kind: `--data-kind`, or detected from its path).
    classes : tuple of str
        The label vocabulary; a label's index in it is the model's output index (empty under
        `regression`).
    label_column : str
        The column (table, hf) holding the label.
    image_size, channels : (H, W) and C
        Every image is converted to C channels (1: greyscale, 3: RGB) and resized to H x W.
    image_column : str
        The column of a Hugging Face dataset that holds images.
    features : tuple of Feature, or None
        The table columns the model reads, ordered by name (a config's mappings travel as
        JSON with sorted keys, so no other order survives the trip); None for images.
    normalize, mean, std : str, per-channel (or per-numeric-feature) floats
        `fixed`: (value - mean) / std with the given values (None: 0 and 1; a table's, one per
        numeric feature in the features' order, by name); `federated`:
        both from the nodes' counts, sums and sums of squares in a round before training.
    on_bad_record : str
        `stop` at the first unreadable record, or `skip` it and count it.
    regression : bool
        `task=regression`: the label column holds a number to predict (tables only).
    """

    kind: str
    classes: tuple[str, ...]
    label_column: str = "label"
    image_size: tuple[int, int] | None = None
    channels: int | None = None
    image_column: str = "image"
    features: tuple[Feature, ...] | None = None
    normalize: str = "fixed"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    on_bad_record: str = "stop"
    shape: tuple[int, ...] | None = None  # npz: the records' shape as declared
    regression: bool = False

    @property
    def is_images(self) -> bool:
        return self.features is None and (self.shape is None or len(self.shape) == 3)

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.shape is not None:
            return self.shape
        if self.features is None:
            assert self.image_size is not None and self.channels is not None
            return (self.channels, *self.image_size)
        return (sum(f.width for f in self.features),)

    @property
    def numeric(self) -> list[int]:
        """Positions, in the encoded row, of the numeric features (what normalisation scales)."""
        if self.features is None:
            return [] if self.is_images else list(range(self.input_shape[0]))
        out, at = [], 0
        for feature in self.features:
            if feature.type != "category":
                out.append(at)
            at += feature.width
        return out

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Task:
        """The task of `cfg.dataset` (one of the node-held kinds); ConfigError names the key."""
        d = cfg.dataset
        kind = str(d.kind)
        if kind not in KINDS:
            raise ConfigError(f"dataset.kind must be one of {', '.join(KINDS)}; got {kind!r}")
        regression = _choice("task", cfg.get("task", "classification"), TASKS) == "regression"
        if regression and not (kind == "table" or (kind == "hf" and d.get("features"))):
            raise ConfigError(
                f"task=regression predicts a number from a table's columns: use dataset=table "
                f"(or dataset=hf with dataset.features), not dataset={kind}"
            )
        classes = () if regression else _classes(d.get("classes"))
        features = _features(d.get("features")) if kind == "table" or d.get("features") else None
        shape = _shape(d.get("input_shape")) if kind == "npz" else None
        images = features is None and shape is None
        task = cls(
            kind=kind,
            classes=classes,
            label_column=str(d.get("label_column", "label")),
            image_size=_image_size(d.get("image_size")) if images else None,
            channels=_channels(d.get("channels")) if images else None,
            image_column=str(d.get("image_column", "image")),
            features=features,
            normalize=_choice("dataset.normalize", d.get("normalize", "fixed"), NORMALIZE),
            mean=_floats("dataset.mean", d.get("mean")),
            std=_floats("dataset.std", d.get("std")),
            on_bad_record=_choice(
                "dataset.on_bad_record", d.get("on_bad_record", "stop"), ON_BAD_RECORD
            ),
            shape=shape,
            regression=regression,
        )
        task._check_normalisation()
        return task

    def _check_normalisation(self) -> None:
        width = self.input_shape[0] if self.is_images else len(self.numeric)
        what = "image channels" if self.is_images else "numeric features"
        for key, values in (("mean", self.mean), ("std", self.std)):
            if values is not None and len(values) not in (1, width):
                raise ConfigError(
                    f"dataset.{key} has {len(values)} values; give one, or one per "
                    f"{what[:-1]} ({width} {what})"
                )
        if self.std is not None and any(v <= 0 for v in self.std):
            raise ConfigError(f"dataset.std must be positive; got {list(self.std)}")


def node_held(cfg: DictConfig) -> bool:
    """Whether the experiment's data is held by the nodes (dataset=images|table|hf|npz)."""
    return OmegaConf.select(cfg, "dataset.kind") is not None


def _classes(value: Any) -> tuple[str, ...]:
    if value is None or isinstance(value, str | int | float):
        raise ConfigError(
            "dataset.classes is not set: name the label vocabulary in the model's output "
            "order, e.g. dataset.classes=[benign,malignant] (on one machine, "
            "runtime.node_data lets fl-run read it from the nodes' files)"
        )
    classes = tuple(str(c) for c in value)
    if len(classes) < 2:
        raise ConfigError(f"dataset.classes needs at least two classes; got {list(classes)}")
    if len(set(classes)) != len(classes):
        raise ConfigError(f"dataset.classes names a class twice: {list(classes)}")
    return classes


def _features(value: Any) -> tuple[Feature, ...]:
    if not isinstance(value, Mapping | DictConfig) or not value:
        raise ConfigError(
            "dataset.features is not set: name the feature columns and their types, e.g. "
            "dataset.features={age:float,visits:int,sex:[f,m]} (a list is a categorical "
            "column's vocabulary; on one machine, runtime.node_data lets fl-run read them "
            "from the nodes' files)"
        )
    out = []
    for name, kind in sorted(value.items()):
        if isinstance(kind, str) and kind in NUMERIC:
            out.append(Feature(str(name), kind))
        elif not isinstance(kind, str) and kind is not None and len(kind) >= 1:
            out.append(Feature(str(name), "category", tuple(str(c) for c in kind)))
        else:
            raise ConfigError(
                f"dataset.features.{name} is {kind!r}; expected float, int or a list of categories"
            )
    return tuple(out)


def _shape(value: Any) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"dataset.input_shape must give the shape of one record, e.g. [30] or [1, 28, 28]; "
            f"got {value!r}"
        ) from None
    if not shape or min(shape) <= 0:
        raise ConfigError(f"dataset.input_shape must be positive; got {list(shape)}")
    return shape


def _image_size(value: Any) -> tuple[int, int]:
    try:
        height, width = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"dataset.image_size must be [H, W]; got {value!r}") from None
    if height <= 0 or width <= 0:
        raise ConfigError(f"dataset.image_size must be positive; got [{height}, {width}]")
    return height, width


def _channels(value: Any) -> int:
    if value not in (1, 3):
        raise ConfigError(f"dataset.channels must be 1 (greyscale) or 3 (RGB); got {value!r}")
    return int(value)


def _choice(key: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ConfigError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    return str(value)


def _floats(key: str, value: Any) -> tuple[float, ...] | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return (float(value),)
    try:
        return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number or a list of numbers; got {value!r}") from None
