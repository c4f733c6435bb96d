"""npy_arrays: the bytes of np.save and the arrays of np.load, exactly, through Flower's Array."""

from __future__ import annotations

import io

import numpy as np
import pytest
from flwr.app import Array

from fl_system.messages import npy_arrays

HANDLED = [
    np.float32(3.5).reshape(()),
    np.zeros(0, dtype=np.float64),
    np.float32([[1e-30, -3.4e38], [np.inf, np.nan]]),  # tiny, huge and special values
    np.arange(12, dtype=">i4").reshape(3, 4),  # big-endian
    np.array([True, False]),
    np.arange(10)[::2],  # a strided view
    np.zeros((2, 0, 3), np.int8),
    np.array([1 + 2j, -0.5j]),
    np.array(["ab", "c"]),
    np.arange(300_000, dtype=np.float16).reshape(3, 100_000),
]


def _saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize("array", HANDLED, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_bytes_and_arrays_are_numpys_own(array: np.ndarray) -> None:
    saved = _saved(array)
    assert npy_arrays.to_npy(array) == saved
    assert npy_arrays.to_npy(array) == saved  # the cached header gives the same bytes
    loaded = npy_arrays.from_npy(saved)
    expected = np.load(io.BytesIO(saved), allow_pickle=False)
    assert loaded is not None
    assert loaded.dtype == expected.dtype and loaded.shape == expected.shape
    np.testing.assert_array_equal(loaded, expected)
    assert loaded.flags.writeable  # as np.load's: callers may change it in place


def test_what_is_not_handled_is_left_to_flower() -> None:
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    assert npy_arrays.to_npy(fortran) is None
    assert npy_arrays.from_npy(_saved(fortran)) is None
    assert npy_arrays.to_npy(np.array([object()], dtype=object)) is None
    assert npy_arrays.from_npy(b"not an npy file") is None
    assert npy_arrays.from_npy(_saved(np.arange(4.0))[:-8]) is None  # cut short


def test_installed_arrays_equal_flowers_and_unhandled_ones_still_work() -> None:
    values = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    npy_arrays.install()
    npy_arrays.install()  # idempotent
    array = Array(values)
    assert array.data == _saved(values) and array.dtype == "float32" and array.shape == (1000,)
    np.testing.assert_array_equal(array.numpy(), values)
    assert Array(values).object_id == array.object_id
    kept = Array(fortran)  # Flower's own conversion
    assert kept.data == _saved(fortran)
    np.testing.assert_array_equal(kept.numpy(), fortran)
    cut = Array(dtype="float32", shape=(1000,), stype=array.stype, data=array.data[:-4])
    with pytest.raises(ValueError):  # np.load's own complaint about the missing bytes
        cut.numpy()
