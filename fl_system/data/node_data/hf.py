"""Hugging Face datasets on disk: a folder written by `Dataset.save_to_disk` (or a
`DatasetDict`'s, with train and test splits), or a folder of its Parquet shards.

Its columns are an Arrow table: feature columns are read as a table is; an image column
(the `Image` feature: encoded bytes, or a path) is decoded as an image folder's files are;
a `ClassLabel` label column's integers become its class names.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fl_system.data.files import DataError
from fl_system.data.node_data.images import decode_image
from fl_system.data.node_data.records import BadRecords, Part, Read
from fl_system.data.node_data.tables import encode_parts
from fl_system.data.node_data.task import Task

SAVED = ("dataset_info.json", "state.json")  # Dataset.save_to_disk
SAVED_DICT = "dataset_dict.json"  # DatasetDict.save_to_disk


def is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and (
        all((path / f).is_file() for f in SAVED) or (path / SAVED_DICT).is_file()
    )


def read_hf(path: Path, task: Task) -> Read:
    """The dataset's train (and test) split, read for the task."""
    splits, names = hf_tables(path)
    if task.is_images:
        return _images(splits, task, names)
    return encode_parts({p: [(f"{path} [{p}]", t)] for p, t in splits.items()}, task, names)


def hf_tables(path: Path) -> tuple[dict[str, pa.Table], tuple[str, ...] | None]:
    """The dataset's splits (train, and test when it has one) as Arrow tables, and its
    ClassLabel's class names (None: labels are values)."""
    return _splits(path) if is_saved_dataset(path) else _shards(path)


def _splits(path: Path) -> tuple[dict[str, pa.Table], tuple[str, ...] | None]:
    import datasets  # slow to import; only nodes that hold such data need it

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as err:  # datasets raises many kinds for a damaged folder
        raise DataError(f"{path}: cannot load the saved dataset ({err})") from None
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise DataError(
                f"{path}: the saved DatasetDict has no train split (splits: {', '.join(loaded)})"
            )
        chosen = {p: loaded[p] for p in ("train", "test") if p in loaded}
    else:
        chosen = {"train": loaded}
    tables = {p: ds.with_format("arrow")[:] for p, ds in chosen.items()}
    return tables, _label_names(next(iter(chosen.values())).features.to_dict())


def _shards(path: Path) -> tuple[dict[str, pa.Table], tuple[str, ...] | None]:
    """Parquet shards (`train-00000-of-00002.parquet`, ...), split by their name's prefix."""
    files = sorted(path.glob("**/*.parquet"))
    if not files:
        raise DataError(
            f"{path}: neither a saved dataset ({SAVED_DICT} or {', '.join(SAVED)}) "
            "nor Parquet shards"
        )
    by_part: dict[str, list[Path]] = {}
    for f in files:
        part = "test" if f.name.startswith("test") or f.parent.name == "test" else "train"
        by_part.setdefault(part, []).append(f)
    tables, names = {}, None
    for part, shards in by_part.items():
        try:
            read = [pq.read_table(f) for f in shards]
            tables[part] = pa.concat_tables(read)
        except (pa.ArrowInvalid, OSError) as err:
            raise DataError(f"{path}: cannot read its Parquet shards ({err})") from None
        meta = (read[0].schema.metadata or {}).get(b"huggingface")
        if meta is not None:
            names = _label_names(json.loads(meta).get("info", {}).get("features", {}))
    if "train" not in tables:
        raise DataError(f"{path}: only test shards; expected train-*.parquet")
    return tables, names


def _label_names(features: dict) -> tuple[str, ...] | None:
    """The names of the first ClassLabel column's classes (None: labels are values)."""
    for spec in features.values():
        if isinstance(spec, dict) and spec.get("_type") == "ClassLabel":
            return tuple(str(n) for n in spec.get("names", ()))
    return None


def _images(splits: dict[str, pa.Table], task: Task, names: tuple[str, ...] | None) -> Read:
    bad = BadRecords(task.on_bad_record)
    modes: set[str] = set()
    found: set[str] = set()
    index = {c: i for i, c in enumerate(task.classes)}
    parts = {}
    for part, table in splits.items():
        for column in (task.image_column, task.label_column):
            if column not in table.column_names:
                raise DataError(
                    f'{part} split: no column "{column}" (columns: {", ".join(table.column_names)})'
                )
        xs, ys = [], []
        images = table.column(task.image_column).to_pylist()
        labels = table.column(task.label_column).to_pylist()
        for row, (image, label) in enumerate(zip(images, labels, strict=True)):
            where = f"{part} split record {row + 1}"
            name = names[label] if names is not None and isinstance(label, int) else str(label)
            found.add(name)
            if name not in index:
                bad.found(where, f'label "{name}" is not in dataset.classes')
                continue
            source = _image_source(image)
            if source is None:
                bad.found(where, f'no image in column "{task.image_column}"')
                continue
            decoded = decode_image(source, task, bad, modes, where)
            if decoded is not None:
                xs.append(decoded)
                ys.append(index[name])
        assert task.channels is not None and task.image_size is not None
        x = np.stack(xs) if xs else np.zeros((0, task.channels, *task.image_size), np.uint8)
        parts[part] = Part(x, np.asarray(ys, dtype=np.int64))
    return Read(
        parts, classes=tuple(sorted(found)), image_modes=tuple(sorted(modes)), skipped=bad.count
    )


def _image_source(image: object) -> bytes | Path | None:
    """The Image feature's stored form: {"bytes": ..., "path": ...}."""
    if isinstance(image, dict):
        if image.get("bytes"):
            return image["bytes"]
        if image.get("path"):
            return Path(image["path"])
    return None
