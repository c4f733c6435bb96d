"""Client state that must outlive a SuperNode restart (control variates, previous models).

`context.state` lives in SuperNode memory and is lost when the node restarts, so every
record saved here is also written to the node's state directory, keyed by the run id
(`fl-run` makes a new one per run; resumptions keep it) and the partition id. A restarted node (new
node id, same partition) picks it up again, also in a resumed run.
"""

from __future__ import annotations

import os
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.logger import log as flwr_log

STATE_DIR_ENV = "FL_STATE_DIR"


def default_state_root() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".local" / "state" / "fl_system")


class ClientState:
    """Named ArrayRecords kept in `context.state` and mirrored to disk."""

    def __init__(self, memory: RecordDict, root: Path, run_id: str, partition_id: int):
        self._memory = memory
        # A resumed run keeps its run id and continues; a new run starts from nothing.
        self.directory = root / run_id / f"partition-{partition_id}"

    def load(self, name: str) -> ArrayRecord | None:
        """The saved record, from memory or (after a restart) from disk; None if never saved."""
        if name in self._memory.array_records:
            return self._memory.array_records[name]
        path = self._path(name)
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as f:
            keys = [str(k) for k in f["__keys__"]]
            record = ArrayRecord({k: Array(f[f"a{i}"]) for i, k in enumerate(keys)})
        self._memory[name] = record
        flwr_log(INFO, "fl_system: restored client state '%s' from %s", name, path)
        return record

    def save(self, name: str, record: ArrayRecord) -> None:
        self._memory[name] = record
        self.directory.mkdir(parents=True, exist_ok=True)
        arrays = {f"a{i}": v for i, v in enumerate(record.to_numpy_ndarrays())}
        arrays["__keys__"] = np.array(list(record.keys()))
        tmp = self._path(name).with_suffix(".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, self._path(name))

    def _path(self, name: str) -> Path:
        return self.directory / f"{name}.npz"
