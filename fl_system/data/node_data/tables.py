"""Tables: CSV or Parquet files read with pyarrow (also a Hugging Face dataset's columns).

A node's table is one file, or a folder of them (`train.csv` and `test.csv`, or `train/` and
`test/` folders, or any `*.csv` / `*.parquet` files, all training data); the files of a part
must share their columns. Each task feature becomes one float column (a categorical one, one
column per category: one-hot) and the label its index in `dataset.classes`. A missing value,
text in a numeric column, NaN or infinity, an unknown category or label is a bad record.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from fl_system.data.files import DataError
from fl_system.data.node_data.records import BadRecords, Part, Read
from fl_system.data.node_data.task import Feature, Task

SUFFIXES = (".csv", ".parquet", ".pq")


def is_table(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES or (path.is_dir() and bool(_tables_in(path)))


def read_table_files(path: Path, task: Task) -> Read:
    """The node's table files, read, checked against each other and encoded for the task."""
    return encode_parts(table_parts(path), task)


def table_parts(path: Path) -> dict[str, list[tuple[Path | str, pa.Table]]]:
    """The node's tables per part (train, test), each with the file it was read from."""
    return {part: [(f, read_file(f)) for f in files] for part, files in _parts(path).items()}


def read_file(file: Path) -> pa.Table:
    try:
        if file.suffix.lower() == ".csv":
            return pa_csv.read_csv(file)
        return pq.read_table(file)
    except FileNotFoundError:
        raise DataError(f"{file}: no such file") from None
    except PermissionError:
        raise DataError(f"{file}: not readable (permission denied)") from None
    except (pa.ArrowInvalid, OSError) as err:
        kind = "CSV" if file.suffix.lower() == ".csv" else "Parquet"
        raise DataError(f"{file}: cannot read it as {kind} ({_first_line(err)})") from None


def encode_parts(
    tables: dict[str, list[tuple[Path | str, pa.Table]]],
    task: Task,
    label_names: tuple[str, ...] | None = None,
) -> Read:
    """Tables per part -> encoded parts; `label_names` maps integer labels to class names
    (a Hugging Face ClassLabel)."""
    bad = BadRecords(task.on_bad_record)
    first: tuple[Path | str, pa.Schema] | None = None
    parts, found, unconverted = {}, set(), set()
    for part, files in tables.items():
        xs, ys = [], []
        for where, table in files:
            if first is None:
                first = (where, table.schema)
            else:
                _same_columns(where, table.schema, *first)
            if table.num_rows == 0:
                raise DataError(f"{where}: the table has no rows")
            labels = label_values(where, table, task.label_column, label_names)
            if not task.regression:
                found |= {v for v in labels if v is not None}
            x, y, none_numeric = _encode(where, table, labels, task, bad)
            unconverted |= none_numeric
            xs.append(x)
            ys.append(y)
        parts[part] = Part(np.concatenate(xs), np.concatenate(ys))
    assert first is not None
    columns = {f.name: type_name(f.type) for f in first[1]}
    return Read(
        parts,
        classes=tuple(sorted(found)),
        columns=columns,
        unconverted=tuple(sorted(unconverted)),
        skipped=bad.count,
    )


def type_name(kind: pa.DataType) -> str:
    """A column's type as the report names it."""
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "text"
    if pa.types.is_dictionary(kind):
        return "category"
    return str(kind)


def _parts(path: Path) -> dict[str, list[Path]]:
    if path.is_file():
        return {"train": [path]}
    if not path.is_dir():
        raise DataError(f"{path}: no such file or folder")
    named = {p: _tables_in(path, p) for p in ("train", "test")}
    if named["train"]:
        return {p: files for p, files in named.items() if files}
    files = _tables_in(path)
    if not files:
        raise DataError(f"{path}: no {', '.join(SUFFIXES)} files")
    return {"train": files}


def _tables_in(folder: Path, part: str | None = None) -> list[Path]:
    """Table files of a folder: `part.*` and `part/*` when a part is named, else all."""
    if part is None:
        return sorted(f for f in folder.iterdir() if f.suffix.lower() in SUFFIXES)
    named = [folder / f"{part}{s}" for s in SUFFIXES if (folder / f"{part}{s}").is_file()]
    sub = folder / part
    return named + (_tables_in(sub) if sub.is_dir() else [])


def _same_columns(
    where: Path | str, schema: pa.Schema, ref_where: Path | str, ref: pa.Schema
) -> None:
    if schema.names == ref.names and all(
        type_name(a.type) == type_name(b.type) for a, b in zip(schema, ref, strict=True)
    ):
        return
    ours = {f.name: type_name(f.type) for f in schema}
    theirs = {f.name: type_name(f.type) for f in ref}
    diff = [
        f"{name}: {ours.get(name, 'missing')} here, {theirs.get(name, 'missing')} there"
        for name in dict.fromkeys([*theirs, *ours])
        if ours.get(name) != theirs.get(name)
    ] or ["the same columns in another order"]
    raise DataError(f"{where}: another schema than {ref_where} ({'; '.join(diff)})")


def label_values(
    where: Path | str, table: pa.Table, column: str, names: tuple[str, ...] | None
) -> list[str | None]:
    """The label column's values as text (a ClassLabel's integers as its `names`)."""
    if column not in table.column_names:
        raise DataError(
            f'{where}: no label column "{column}" (dataset.label_column); '
            f"columns: {', '.join(table.column_names)}"
        )
    values = table.column(column).to_pylist()
    if names is not None:
        return [
            names[v] if isinstance(v, int) and 0 <= v < len(names) else as_text(v) for v in values
        ]
    return [as_text(v) for v in values]


def as_text(value: object) -> str | None:
    """A label or category value as text: 1, 1.0 and "1" alike."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _encode(
    where: Path | str, table: pa.Table, labels: list[str | None], task: Task, bad: BadRecords
) -> tuple[np.ndarray, np.ndarray, set[str]]:
    assert task.features is not None
    n = table.num_rows
    problem: list[str | None] = [None] * n
    y = _targets(labels, task, problem)
    columns, unconverted = [], set()
    for feature in task.features:
        if feature.name not in table.column_names:
            raise DataError(f'{where}: no column "{feature.name}" (dataset.features)')
        column = table.column(feature.name)
        if feature.type != "category" and _is_numeric(column.type):
            values, converted = _numeric_column(feature, column, problem)
        else:
            values, converted = _column(feature, column.to_pylist(), problem)
        if not converted and feature.type != "category":
            unconverted.add(feature.name)
        columns.append(values)
    x = np.concatenate(columns, axis=1) if columns else np.zeros((n, 0), np.float32)
    keep = np.ones(n, dtype=bool)
    for row, reason in enumerate(problem):
        if reason is not None and not unconverted:
            bad.found(f"{where} record {row + 1}", reason)
            keep[row] = False
    return x[keep], y[keep], unconverted


def _targets(labels: list[str | None], task: Task, problem: list[str | None]) -> np.ndarray:
    """Labels as class indices, or under task=regression as numbers; noting problems."""
    if task.regression:
        y = np.zeros(len(labels), dtype=np.float32)
        for row, label in enumerate(labels):
            number = None if label is None else _number(label)
            if number is None or not math.isfinite(number):
                problem[row] = f'label "{label}" is not a finite number (task=regression)'
            else:
                y[row] = number
        return y
    index = {c: i for i, c in enumerate(task.classes)}
    y = np.full(len(labels), -1, dtype=np.int64)
    for row, label in enumerate(labels):
        if label is None:
            problem[row] = f'no label (column "{task.label_column}" is empty)'
        elif label not in index:
            problem[row] = f'label "{label}" is not in dataset.classes'
        else:
            y[row] = index[label]
    return y


def _is_numeric(kind: pa.DataType) -> bool:
    return pa.types.is_floating(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind)


def _numeric_column(
    feature: Feature, column: pa.ChunkedArray, problem: list[str | None]
) -> tuple[np.ndarray, bool]:
    """A numeric column converted at once (the per-value path, for text, is slow on millions
    of rows); missing and non-finite values noted as `_column` notes them."""
    missing = column.is_null().to_numpy(zero_copy_only=False)
    values = column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    finite = np.isfinite(values)
    for row in np.flatnonzero(missing | ~finite):
        if problem[row] is None:
            problem[row] = (
                f'no value in column "{feature.name}"'
                if missing[row]
                else f'column "{feature.name}" holds {values[row]} (not finite)'
            )
    usable = ~missing & finite
    out = np.where(usable, values, 0.0).astype(np.float32)[:, None]
    return out, bool(usable.any())


def _column(
    feature: Feature, values: list[object], problem: list[str | None]
) -> tuple[np.ndarray, bool]:
    """One feature's encoded column(s), noting each row's first problem; and whether any
    value converted."""
    width = feature.width
    out = np.zeros((len(values), width), dtype=np.float32)
    converted = False
    for row, value in enumerate(values):
        reason = None
        if value is None:
            reason = f'no value in column "{feature.name}"'
        elif feature.type == "category":
            text = as_text(value)
            if text in feature.categories:
                out[row, feature.categories.index(text)] = 1.0
            else:
                reason = (
                    f'column "{feature.name}" holds "{text}", '
                    f"not in dataset.features.{feature.name}"
                )
        else:
            number = _number(value)
            if number is None:
                reason = f'column "{feature.name}" holds "{value}", the task says {feature.type}'
            elif not math.isfinite(number):
                reason = f'column "{feature.name}" holds {number} (not finite)'
            else:
                out[row, 0] = number
                converted = True
        if reason is not None and problem[row] is None:
            problem[row] = reason
    return out, converted


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
