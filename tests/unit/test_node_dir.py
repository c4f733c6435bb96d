"""A silo's own data directory: round trip and every way it can be wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fl_system.data import DataError
from fl_system.data.node_dir import load_node_dir, write_node_dir


def test_round_trip(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(5, 1, 4, 4)).astype(np.float32)
    y = np.array([0, 3, 1, 1, 9], dtype=np.int64)
    file = write_node_dir(tmp_path / "silo", x, y)
    assert file == tmp_path / "silo" / "train.npz"
    x2, y2 = load_node_dir(tmp_path / "silo")
    assert x2.dtype == np.float32 and y2.dtype == np.int64
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(y2, y)


def test_float64_and_int32_are_converted(tmp_path: Path) -> None:
    np.savez(tmp_path / "train.npz", x=np.ones((3, 2)), y=np.array([0, 1, 2], dtype=np.int32))
    x, y = load_node_dir(str(tmp_path))
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert y.tolist() == [0, 1, 2]


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_node_dir(tmp_path / "empty")
    assert str(tmp_path / "empty" / "train.npz") in str(err.value)


def test_missing_key(tmp_path: Path) -> None:
    np.savez(tmp_path / "train.npz", x=np.ones((3, 2), np.float32), labels=np.zeros(3, np.int64))
    with pytest.raises(DataError, match="key 'y' missing"):
        load_node_dir(tmp_path)


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        (np.ones((3, 2), np.uint8), np.zeros(3, np.int64), "x has dtype uint8"),
        (np.ones((3, 2), np.float32), np.zeros(3, np.float32), "y has dtype float32"),
        (np.ones((3, 2), np.float32), np.zeros(2, np.int64), "3 samples and y 2"),
        (np.ones(3, np.float32), np.zeros(3, np.int64), "at least 2 dimensions"),
        (np.ones((3, 2), np.float32), np.array([0, -1, 2]), "negative label"),
        (np.full((3, 2), np.nan, np.float32), np.zeros(3, np.int64), "NaN"),
    ],
)
def test_bad_arrays(tmp_path: Path, x: np.ndarray, y: np.ndarray, message: str) -> None:
    np.savez(tmp_path / "train.npz", x=x, y=y)
    with pytest.raises(DataError, match=message):
        load_node_dir(tmp_path)
    with pytest.raises(DataError, match=message):
        write_node_dir(tmp_path / "out", x, y)


def test_not_an_npz(tmp_path: Path) -> None:
    (tmp_path / "train.npz").write_bytes(b"garbage, not a zip archive")
    with pytest.raises(DataError, match="cannot read"):
        load_node_dir(tmp_path)
    with open(tmp_path / "train.npz", "wb") as f:
        np.save(f, np.ones(3))
    with pytest.raises(DataError, match="single array"):
        load_node_dir(tmp_path)


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    x = np.empty(3, dtype=object)
    np.savez(tmp_path / "train.npz", x=x, y=np.zeros(3, np.int64))
    with pytest.raises(DataError, match="cannot read"):
        load_node_dir(tmp_path)
