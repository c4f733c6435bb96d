"""Data a node holds itself (image folders, CSV/Parquet tables, Hugging Face datasets on
disk, npz), read for the experiment's task; it never leaves the node.

`read_node_data` detects the kind (or takes the one the node names), reads every record
once, and keeps the decoded arrays in the node's cache (keyed by the files' names, sizes and
times and by the task), so the processes that serve later messages read arrays, not images.
What the node found goes into its `NodeReport`, which the handshake sends instead of rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fl_system.data.files import DataError
from fl_system.data.node_data.hf import is_saved_dataset, read_hf
from fl_system.data.node_data.images import is_image_folder, read_image_folder
from fl_system.data.node_data.npz import is_npz, read_npz
from fl_system.data.node_data.records import Part, Read
from fl_system.data.node_data.report import NodeReport, mismatches
from fl_system.data.node_data.tables import is_table, read_table_files
from fl_system.data.node_data.task import KINDS, Task, node_held

__all__ = [
    "KINDS",
    "NodeData",
    "NodeReport",
    "Part",
    "Task",
    "detect_kind",
    "mismatches",
    "node_held",
    "normalised",
    "read_node_data",
]

_CACHE_VERSION = 2
_READERS: dict[str, Callable[[Path, Task], Read]] = {
    "images": read_image_folder,
    "table": read_table_files,
    "hf": read_hf,
    "npz": read_npz,
}
_DETECTORS: dict[str, Callable[[Path], bool]] = {
    "hf": is_saved_dataset,
    "npz": is_npz,
    "table": is_table,
    "images": is_image_folder,
}


@dataclass
class NodeData:
    """A node's parts (test: None when it holds no test part) and its report."""

    train: Part
    test: Part | None
    report: NodeReport


def detect_kind(path: Path, preferred: str | None = None) -> str:
    """The kind of data at `path`: `preferred` (the task's) when it fits, else the first
    that does; DataError when none does."""
    _check_exists(path)
    order = [preferred] if preferred in _DETECTORS else []
    for kind in [*order, *_DETECTORS]:
        try:
            if _DETECTORS[kind](path):
                return kind
        except OSError as err:
            raise DataError(f"{path}: cannot read it ({err.strerror or err})") from None
    raise DataError(
        f"{path}: cannot tell what data this is: expected class folders of images, CSV or "
        "Parquet files, a dataset saved with save_to_disk, or train.npz (name the kind with "
        "--data-kind)"
    )


def read_node_data(
    path: str | Path, task: Task, *, kind: str | None = None, cache_root: Path | None = None
) -> NodeData:
    """The node's data for `task`, from the cache when its files have not changed."""
    path = Path(path).expanduser()
    if kind is None:
        kind = detect_kind(path, task.kind)  # it checks that the path is there
    elif kind not in _READERS:
        raise DataError(f"data kind {kind!r} is not one of {', '.join(KINDS)}")
    else:
        _check_exists(path)
    cache = _cache_file(path, kind, task, cache_root) if cache_root is not None else None
    if cache is not None and cache.is_dir():
        loaded = _load_cached(cache)
        if loaded is not None:
            return loaded
    read = _READERS[kind](path, task)
    data = NodeData(
        train=read.parts["train"],
        test=read.parts.get("test"),
        report=NodeReport(
            path=str(path),
            kind=kind,
            train_examples=len(read.parts["train"].y),
            test_examples=len(read.parts["test"].y) if "test" in read.parts else 0,
            classes=read.classes,
            columns=read.columns,
            unconverted=read.unconverted,
            image_modes=read.image_modes,
            skipped=read.skipped,
        ),
    )
    if cache is not None:  # kept mapped from the cache, not in memory, when it could be written
        _save_cached(cache, data)
        return _load_cached(cache) or data
    return data


def normalised(x: np.ndarray, task: Task, mean=None, std=None) -> np.ndarray:
    """Records as the model takes them: images scaled to [0, 1], then (x - mean) / std per
    channel (images) or per numeric feature (tables); the task's values unless given."""
    x = x.astype(np.float32) / 255.0 if x.dtype == np.uint8 else x.astype(np.float32)
    mean = task.mean if mean is None else mean
    std = task.std if std is None else std
    if mean is None and std is None:
        return x
    if task.is_images:
        shape = (1, -1, 1, 1)
        m = np.asarray(mean if mean is not None else [0.0], np.float32).reshape(shape)
        s = np.asarray(std if std is not None else [1.0], np.float32).reshape(shape)
        return (x - m) / s
    columns = task.numeric
    m = np.asarray(mean if mean is not None else [0.0], np.float32)
    s = np.asarray(std if std is not None else [1.0], np.float32)
    x[:, columns] = (x[:, columns] - m) / s
    return x


def _check_exists(path: Path) -> None:
    if os.path.lexists(path) and not path.exists():
        try:
            path.resolve(strict=True)
        except (RuntimeError, OSError) as err:
            raise DataError(f"{path}: symbolic link loop or broken link ({err})") from None
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if not os.access(path, os.R_OK):
        raise DataError(f"{path}: not readable (permission denied)")


STAT_UP_TO = 5000  # files whose sizes and times key the cache; past it, names and folders


def _fingerprint(path: Path) -> list:
    """What keys a node's cached arrays: every file's relative name and every folder's
    modification time (a file added, removed or renamed changes its folder's), and, for up to
    STAT_UP_TO files, each one's size and time too. A ClientApp process computes it for every
    message: stat-ing 70,000 images each time cost about a second."""
    if path.is_file():
        st = path.stat()
        return [(path.name, st.st_size, st.st_mtime_ns)]
    names, folders = [], []
    for folder, _, files in os.walk(path):
        folders.append((os.path.relpath(folder, path), os.stat(folder).st_mtime_ns))
        names += [os.path.relpath(os.path.join(folder, name), path) for name in files]
    names.sort()
    if len(names) > STAT_UP_TO:
        return [sorted(folders), names]
    stats = []
    for name in names:
        try:
            st = os.stat(path / name)
        except OSError:
            continue
        stats.append((name, st.st_size, st.st_mtime_ns))
    return [sorted(folders), stats]


def _cache_file(path: Path, kind: str, task: Task, root: Path) -> Path:
    reading = asdict(task)
    for key in ("normalize", "mean", "std", "kind"):  # applied after the cache
        reading.pop(key)
    spec = {
        "version": _CACHE_VERSION,
        "path": str(path.resolve()),
        "kind": kind,
        "task": reading,
        "files": _fingerprint(path),
    }
    key = hashlib.sha256(json.dumps(spec, sort_keys=True, default=list).encode()).hexdigest()
    return root / "node-data" / key[:20]


def _load_cached(folder: Path) -> NodeData | None:
    """The cached parts, memory-mapped (a large node's records are paged in as batches use
    them; `streamed`), and the report."""
    try:
        report = NodeReport.from_json((folder / "report.json").read_text())
        arrays = {
            f.stem: np.load(f, mmap_mode="r", allow_pickle=False) for f in folder.glob("*.npy")
        }
        test = Part(arrays["test_x"], arrays["test_y"]) if "test_x" in arrays else None
        return NodeData(Part(arrays["train_x"], arrays["train_y"]), test, report)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_cached(folder: Path, data: NodeData) -> None:
    """Write the parts as .npy files (which map) and the report, all at once (a folder
    renamed into place); a read-only or full cache only costs the next process the read."""
    parts = {"train": data.train, "test": data.test}
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, part in parts.items():
            if part is not None:
                np.save(tmp / f"{name}_x.npy", part.x)
                np.save(tmp / f"{name}_y.npy", part.y)
        (tmp / "report.json").write_text(data.report.to_json())
        os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
