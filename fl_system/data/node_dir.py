"""A silo's own data directory: `<path>/train.npz` with arrays `x` and `y`.

Real silos bring their data instead of a partition of a shared dataset. The format is a
plain numpy archive so that anyone can write one (see `write_node_dir`); it is loaded with
`allow_pickle=False`, so a data directory cannot run code. `x` must already be normalised the
way the model expects, because the server cannot see it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from fl_system.data.files import DataError

TRAIN_FILE = "train.npz"


def _validate(x: np.ndarray, y: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Check shapes and dtypes; return (float32 x, int64 y)."""
    if not np.issubdtype(x.dtype, np.floating):
        raise DataError(
            f"{where}: x has dtype {x.dtype}, expected float32 already normalised "
            "(raw integer pixels must be scaled and normalised first)"
        )
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{where}: y has dtype {y.dtype}, expected int64 class labels")
    if x.ndim < 2 or y.ndim != 1:
        raise DataError(
            f"{where}: x has shape {x.shape} and y {y.shape}; expected x (N, ...) with at "
            "least 2 dimensions and y (N,)"
        )
    if len(x) != len(y) or len(y) == 0:
        raise DataError(f"{where}: x has {len(x)} samples and y {len(y)}; expected equal, > 0")
    if y.min() < 0:
        raise DataError(f"{where}: y has negative label {y.min()}; expected labels >= 0")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        raise DataError(f"{where}: x holds NaN or infinite values")
    return x, y.astype(np.int64, copy=False)


def load_node_dir(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """A silo's own data: <path>/train.npz with arrays x (float32, already normalised), y (int64).

    Integer-typed y is widened to int64 and float64 x narrowed to float32; anything else that
    does not fit raises DataError naming the file and the problem.
    """
    return load_npz(Path(path) / TRAIN_FILE)


def load_npz(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """Arrays x (float) and y (integer labels) of one .npz file, checked."""
    if not file.is_file():
        raise DataError(f"node data file {file} not found; expected an .npz with arrays x, y")
    try:
        loaded = np.load(file, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise DataError(f"{file} holds a single array; expected an .npz with arrays x and y")
        with loaded as npz:
            arrays = {k: npz[k] for k in ("x", "y") if k in npz.files}
            keys = sorted(npz.files)
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"cannot read {file} as a numpy .npz archive: {e}") from e
    for key in ("x", "y"):
        if key not in arrays:
            raise DataError(f"{file}: key {key!r} missing (has {keys}); expected arrays x and y")
    x, y = arrays["x"], arrays["y"]
    return _validate(x, y, str(file))


def write_node_dir(path: str | Path, x: np.ndarray, y: np.ndarray) -> Path:
    """Create `<path>/train.npz` from x (normalised floats) and y (labels); return the file."""
    x, y = _validate(np.asarray(x), np.asarray(y), f"write_node_dir({path})")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / TRAIN_FILE
    np.savez(file, x=x, y=y)
    return file
