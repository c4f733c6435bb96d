"""npz: `PATH/train.npz` (and optionally `PATH/test.npz`), or one `.npz` file, with arrays
`x` (float, the task's input shape) and `y` (integer indices into `dataset.classes`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fl_system.data.files import DataError
from fl_system.data.node_data.records import Part, Read
from fl_system.data.node_data.task import Task
from fl_system.data.node_dir import TRAIN_FILE, load_npz

TEST_FILE = "test.npz"


def is_npz(path: Path) -> bool:
    return path.suffix.lower() == ".npz" or (path / TRAIN_FILE).is_file()


def read_npz(path: Path, task: Task) -> Read:
    files = {"train": path} if path.is_file() else {"train": path / TRAIN_FILE}
    if path.is_dir() and (path / TEST_FILE).is_file():
        files["test"] = path / TEST_FILE
    parts = {}
    for part, file in files.items():
        x, y = load_npz(file)
        if tuple(x.shape[1:]) != task.input_shape:
            raise DataError(
                f"{file}: x holds records of shape {list(x.shape[1:])}; the task's input "
                f"shape is {list(task.input_shape)}"
            )
        if y.max() >= len(task.classes):
            raise DataError(
                f"{file}: label {int(y.max())} is outside dataset.classes "
                f"({len(task.classes)} classes: 0..{len(task.classes) - 1})"
            )
        parts[part] = Part(x, y)
    found = sorted({int(v) for p in parts.values() for v in np.unique(p.y)})
    return Read(parts, classes=tuple(task.classes[i] for i in found))
