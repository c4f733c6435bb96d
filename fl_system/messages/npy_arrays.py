"""Flower's Array <-> NumPy conversion without re-deriving the .npy header every time.

Flower keeps every Array as the bytes of `np.save` and reads it back with `np.load`: each
call formats or parses the header (`ast.literal_eval` of a dict) and goes through a file
object, 12-25 us per array, while copying the values takes a few. A round moves the same
few shapes again and again (a model's tensors, one flat array per dtype when packed), so the
headers are made and parsed once per shape here; the bytes and arrays are exactly what
`np.save` and `np.load` give. Anything else (object arrays, Fortran order, a version-2
header) goes to Flower's own code.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from flwr.app import Array
from flwr.common.constant import SType

MAGIC_1_0 = b"\x93NUMPY\x01\x00"  # np.save's format version 1.0
PREFIX = len(MAGIC_1_0) + 2  # magic, version, then the header's length (uint16 LE)
MAX_CACHED = 4096  # distinct headers remembered (shapes seen by one process)

_headers: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}
_layouts: dict[bytes, tuple[np.dtype, tuple[int, ...], int]] = {}
_flower: dict[str, Any] = {}  # Flower's own methods, kept for what is not handled here


def to_npy(array: np.ndarray) -> bytes | None:
    """`np.save`'s bytes for a C-ordered array of plain values; None for anything else."""
    if array.dtype.hasobject or (array.flags.f_contiguous and not array.flags.c_contiguous):
        return None
    key = (array.dtype, array.shape)
    header = _headers.get(key)
    if header is None:
        buffer = io.BytesIO()
        fields = np.lib.format.header_data_from_array_1_0(array)
        try:
            np.lib.format.write_array_header_1_0(buffer, fields)
        except ValueError:  # too long for version 1.0: np.save writes version 2.0
            return None
        header = buffer.getvalue()
        if len(_headers) < MAX_CACHED:
            _headers[key] = header
    return header + array.tobytes()


def from_npy(data: bytes) -> np.ndarray | None:
    """`np.load` of `np.save`'s bytes (a writable copy), for a version-1.0 header of a
    C-ordered array of plain values; None for anything else."""
    if data[: len(MAGIC_1_0)] != MAGIC_1_0 or len(data) < PREFIX:
        return None
    end = PREFIX + int.from_bytes(data[len(MAGIC_1_0) : PREFIX], "little")
    header = bytes(data[:end])
    layout = _layouts.get(header)
    if layout is None:
        stream = io.BytesIO(header)
        np.lib.format.read_magic(stream)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        if fortran or dtype.hasobject:
            return None
        layout = (dtype, tuple(shape), int(np.prod(shape, dtype=np.int64)))
        if len(_layouts) < MAX_CACHED:
            _layouts[header] = layout
    dtype, shape, count = layout
    if len(data) - end != count * dtype.itemsize:
        return None  # cut short or padded: np.load says what is wrong
    return np.frombuffer(data, dtype=dtype, count=count, offset=end).reshape(shape).copy()


def _from_numpy_ndarray(cls: type[Array], ndarray: np.ndarray) -> Array:
    data = to_npy(ndarray) if isinstance(ndarray, np.ndarray) else None
    if data is None:
        return _flower["from_numpy_ndarray"].__func__(cls, ndarray)
    array = cls.__new__(cls)
    # as Flower's own ndarray initialisation sets them: through __dict__, dirty until deflated
    array.__dict__.update(
        dtype=str(ndarray.dtype), shape=tuple(ndarray.shape), stype=SType.NUMPY, data=data
    )
    return array


def _numpy(self: Array) -> np.ndarray:
    if self.stype == SType.NUMPY:
        array = from_npy(self.data)
        if array is not None:
            return array
    return _flower["numpy"](self)


def install() -> None:
    """Flower's `Array.from_numpy_ndarray` (behind `Array(ndarray)`) and `Array.numpy` use
    the cached headers in this process (idempotent)."""
    if _flower:
        return
    _flower["from_numpy_ndarray"] = Array.__dict__["from_numpy_ndarray"]
    _flower["numpy"] = Array.numpy
    Array.from_numpy_ndarray = classmethod(_from_numpy_ndarray)  # type: ignore[method-assign,assignment]
    Array.numpy = _numpy  # type: ignore[method-assign]
