"""The task's vocabulary read from the nodes' files, when the experiment leaves it unset.

On one machine (`runtime.node_data=[...]`) every node's files are where fl-run runs, so what
an experiment does not name can be read from them before anything starts: the label
vocabulary (`dataset.classes`: class folders, a label column's values, a ClassLabel's names),
a table's feature columns and their types (`dataset.features`: numeric columns as float or
int, text columns as categories), an npz record's shape. Only names and types are read, the
way the handshake's report reads them; the completed config is what the run records and the
nodes check their data against. Nodes on other machines cannot be read from here: there the
experiment names its task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.data.node_data import detect_kind
from fl_system.data.node_data.hf import hf_tables
from fl_system.data.node_data.images import class_names
from fl_system.data.node_data.npz import TEST_FILE
from fl_system.data.node_data.tables import as_text, label_values, table_parts, type_name
from fl_system.data.node_data.task import node_held
from fl_system.data.node_dir import load_npz
from fl_system.settings.value_checks import ConfigError

MAX_CATEGORIES = 32  # a text column with more distinct values is not read as a category
_NUMERIC = ("int", "bool", "float")  # widening order: an int column beside floats is float
_CATEGORICAL = ("text", "category")


@dataclass
class Survey:
    """What one node's files hold, by name and type (Parameters: no value but labels and
    the categories of text columns)."""

    where: str
    labels: set[str] = field(default_factory=set)
    label_order: tuple[str, ...] | None = None  # a ClassLabel's names, in its order
    columns: dict[str, str] = field(default_factory=dict)  # column -> type as read
    values: dict[str, set[str]] = field(default_factory=dict)  # text column -> its values
    shape: tuple[int, ...] | None = None  # npz: one record's shape


def unset(cfg: DictConfig) -> list[str]:
    """The task's keys the experiment leaves for the nodes' files to give."""
    if not node_held(cfg):
        return []
    d = cfg.dataset
    keys = []
    if cfg.get("task", "classification") != "regression" and d.get("classes") is None:
        keys.append("classes")
    if d.kind == "table" and not d.get("features"):
        keys.append("features")
    if d.kind == "npz" and d.get("input_shape") is None:
        keys.append("input_shape")
    return keys


def complete_task(cfg: DictConfig, say: Callable[[str], None] = print) -> None:
    """Fill in, in place, the task's keys the experiment leaves unset, from the files of
    `runtime.node_data` (nothing to do when it names them all, or lists no files)."""
    keys = unset(cfg)
    listed = [str(p) for p in OmegaConf.select(cfg, "runtime.node_data") or []]
    if not keys or not listed:
        return
    d = cfg.dataset
    label = str(d.get("label_column", "label"))
    paths = [Path(p).expanduser() for p in listed]
    surveys = [survey(p, detect_kind(p, str(d.kind)), label, d) for p in paths]
    found: dict = {}
    if "classes" in keys:
        found["classes"] = _classes(surveys)
    if "features" in keys:
        found["features"] = _features(surveys, label, say)
    if "input_shape" in keys:
        found["input_shape"] = _shape(surveys)
    with open_dict(cfg):
        for key, value in found.items():
            cfg.dataset[key] = value
    say(f"read from the nodes' files (runtime.node_data): {_described(found)}")


def survey(path: Path, kind: str, label_column: str, dataset: DictConfig) -> Survey:
    """The names and types `path`'s files hold, for a task of `kind`."""
    here = Survey(where=str(path))
    if kind == "images":
        here.labels = class_names(path)
    elif kind == "npz":
        files = [path] if path.is_file() else [path / "train.npz", path / TEST_FILE]
        for file in (f for f in files if f.is_file()):
            x, y = load_npz(file)
            here.shape = tuple(int(v) for v in x.shape[1:])
            here.labels |= {str(i) for i in range(int(y.max()) + 1)} if len(y) else set()
    else:
        if kind == "hf":
            splits, names = hf_tables(path)
            tables = [(f"{path} [{part}]", t) for part, t in splits.items()]
        else:
            names = None
            tables = [t for files in table_parts(path).values() for t in files]
        here.label_order = names
        image_column = str(dataset.get("image_column", "image"))
        for where, table in tables:
            if kind != "hf" or image_column not in table.column_names:
                _columns(here, table)
            here.labels |= {
                v for v in label_values(where, table, label_column, names) if v is not None
            }
    return here


def _columns(here: Survey, table) -> None:
    for f in table.schema:
        here.columns[f.name] = type_name(f.type)
        if here.columns[f.name] in _CATEGORICAL:
            seen = here.values.setdefault(f.name, set())
            if len(seen) <= MAX_CATEGORIES:
                unique = table.column(f.name).unique().to_pylist()[: MAX_CATEGORIES + 1]
                seen |= {as_text(v) for v in unique if v is not None}


def _classes(surveys: list[Survey]) -> list[str]:
    """The union of the nodes' labels: a ClassLabel's order when the nodes give one, else
    numbers by value and names alphabetically."""
    union = set().union(*(s.labels for s in surveys))
    orders = {s.label_order for s in surveys if s.label_order is not None}
    if len(orders) == 1:
        (order,) = orders
        if union <= set(order):
            return list(order)
    if len(union) < 2:
        raise ConfigError(
            f"the nodes' data holds {len(union)} label value(s) ({', '.join(sorted(union))}): "
            "a classifier needs two; check dataset.label_column, or set dataset.classes"
        )
    try:
        return sorted(union, key=float)
    except ValueError:
        return sorted(union)


def _features(surveys: list[Survey], label: str, say: Callable[[str], None]) -> dict:
    """Every column all nodes hold but the label, typed as the nodes read it."""
    every = set.intersection(*(set(s.columns) for s in surveys)) - {label}
    left_out = {c: "not on every node" for c in set().union(*(s.columns for s in surveys))}
    left_out.pop(label, None)
    features: dict = {}
    for column in sorted(every):
        types = {s.columns[column] for s in surveys}
        if types <= set(_NUMERIC):
            left_out.pop(column)
            features[column] = "int" if types <= {"int", "bool"} else "float"
        elif types <= set(_CATEGORICAL):
            values = set().union(*(s.values.get(column, set()) for s in surveys))
            if len(values) > MAX_CATEGORIES:
                left_out[column] = f"text with over {MAX_CATEGORIES} distinct values"
            else:
                left_out.pop(column)
                features[column] = sorted(values)
        elif types & set(_NUMERIC) and types & set(_CATEGORICAL):
            text = next(s for s in surveys if s.columns[column] in _CATEGORICAL)
            number = next(s for s in surveys if s.columns[column] in _NUMERIC)
            raise ConfigError(
                f'{text.where}: column "{column}" is text, on {number.where} it is '
                f"{number.columns[column]}: fix the files, or name the columns to use in "
                "dataset.features"
            )
        else:
            left_out[column] = f"of type {', '.join(sorted(types))}"
    if left_out:
        shown = "; ".join(f'"{c}" ({why})' for c, why in sorted(left_out.items()))
        say(f"columns left out of dataset.features: {shown}")
    if not features:
        raise ConfigError(
            "the nodes' tables have no numeric or categorical column besides the label that "
            "every node holds: name the columns in dataset.features"
        )
    return features


def _shape(surveys: list[Survey]) -> list[int]:
    shapes = {s.shape for s in surveys}
    if len(shapes) != 1 or None in shapes:
        held = "; ".join(f"{s.where}: {list(s.shape or ())}" for s in surveys)
        raise ConfigError(
            f"the nodes' npz records differ in shape ({held}): set dataset.input_shape"
        )
    (shape,) = shapes
    assert shape is not None
    return list(shape)


def _described(found: dict) -> str:
    parts = []
    if "classes" in found:
        parts.append(f"dataset.classes={_listed(found['classes'])}")
    if "features" in found:
        features = found["features"]
        categorical = sum(not isinstance(t, str) for t in features.values())
        names = _listed(list(features))
        parts.append(
            f"dataset.features: {len(features) - categorical} numeric and {categorical} "
            f"categorical columns {names}"
        )
    if "input_shape" in found:
        parts.append(f"dataset.input_shape={found['input_shape']}")
    return "; ".join(parts) + " (set them to fix them)"


def _listed(values: list, most: int = 8) -> str:
    shown = ",".join(str(v) for v in values[:most])
    return f"[{shown}{',...' if len(values) > most else ''}]"
