"""Readers for the on-disk formats torchvision leaves behind (IDX and CIFAR pickles).

We read the files ourselves instead of going through torchvision's dataset classes because
those re-check md5 sums and insist on their own folder state; here a file that is present and
well-formed is enough, and anything else becomes a `DataError` that names the file.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import BinaryIO

import numpy as np

# IDX type codes -> big-endian numpy dtypes (http://yann.lecun.com/exdb/mnist/).
_IDX_DTYPES: dict[int, str] = {
    0x08: ">u1",
    0x09: ">i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}
CIFAR_SHAPE = (3, 32, 32)


class DataError(ValueError):
    """Bad or missing data; message names the file/key and what was expected."""


def find_idx_file(raw_dir: Path, name: str) -> Path:
    """Return `<raw_dir>/<name>` or its `.gz` twin, whichever exists (plain first)."""
    plain = raw_dir / name
    if plain.is_file():
        return plain
    gz = raw_dir / f"{name}.gz"
    if gz.is_file():
        return gz
    raise DataError(f"missing data file {plain} (or {gz.name})")


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_idx(path: str | Path, *, expect_ndim: int | None = None) -> np.ndarray:
    """Parse an IDX file (plain or gzip) into a native-endian array, checking its header."""
    path = Path(path)
    try:
        with _open(path) as f:
            raw = f.read()
    except FileNotFoundError as e:
        raise DataError(f"missing data file {path}") from e
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read IDX file {path}: {e}") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DataError(
            f"{path} is not an IDX file: bad magic number {raw[:4].hex() or '(empty)'}; "
            "expected 0x0000 then a type code (0x08 for ubyte) and the number of dimensions"
        )
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    ndim = raw[3]
    if expect_ndim is not None and ndim != expect_ndim:
        raise DataError(f"{path}: IDX header says {ndim} dimensions, expected {expect_ndim}")
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataError(f"{path}: truncated IDX header")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header_len != expected:
        raise DataError(
            f"{path}: IDX header promises shape {shape} ({expected} bytes of data) "
            f"but the file holds {len(raw) - header_len} bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


def read_idx_pair(raw_dir: Path, images: str, labels: str) -> tuple[np.ndarray, np.ndarray]:
    """Read a matching (images, labels) IDX pair: uint8 (N, H, W) and int64 (N,)."""
    x = read_idx(find_idx_file(raw_dir, images), expect_ndim=3)
    y = read_idx(find_idx_file(raw_dir, labels), expect_ndim=1)
    if x.dtype != np.uint8 or y.dtype != np.uint8:
        raise DataError(f"{raw_dir}: {images} and {labels} must hold unsigned bytes (type 0x08)")
    if len(x) != len(y):
        raise DataError(f"{raw_dir}: {images} has {len(x)} images but {labels} {len(y)} labels")
    return x, y.astype(np.int64)


def read_cifar_batch(path: str | Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR python pickle: uint8 images (N, 3, 32, 32) and int64 labels (N,)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"missing data file {path}")
    try:
        with open(path, "rb") as f:
            entry = pickle.load(f, encoding="bytes")
    except Exception as e:  # a corrupt pickle can fail in many ways
        raise DataError(f"cannot read CIFAR pickle {path}: {e}") from e
    if not isinstance(entry, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(entry).__name__}")
    for key in (b"data", label_key):
        if key not in entry:
            raise DataError(f"{path}: key {key!r} missing (keys: {sorted(entry)})")
    data = np.asarray(entry[b"data"])
    labels = np.asarray(entry[label_key], dtype=np.int64)
    row = int(np.prod(CIFAR_SHAPE))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != row:
        raise DataError(f"{path}: b'data' is {data.dtype} {data.shape}, expected uint8 (N, {row})")
    if labels.shape != (len(data),):
        raise DataError(f"{path}: {label_key!r} has shape {labels.shape}, expected ({len(data)},)")
    return data.reshape(-1, *CIFAR_SHAPE), labels


def read_cifar_batches(paths: list[Path], label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate several CIFAR batches (the five CIFAR-10 training files)."""
    parts = [read_cifar_batch(p, label_key) for p in paths]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
