"""Client state that must outlive a SuperNode restart (control variates, previous models).

`context.state` lives in SuperNode memory and is lost when the node restarts, so every
record saved here is also written to the node's state directory, keyed by the run id
(`fl-run` makes a new one per run; resumptions keep it) and the partition id. A restarted node (new
node id, same partition) picks it up again, also in a resumed run.

Files are versioned by the round that saved them (`<name>.r<round>.npz`), and a node that
reads from disk in round r takes the newest version saved before r. A server killed during
round r resumes from its last checkpoint c (at most `checkpoint.every` rounds back) and runs
rounds c + 1 .. r again: its clients must start them from the state they had after round c,
not from what the lost attempts saved (SCAFFOLD's c_i would otherwise be updated twice).
Memory holds what this Flower run saved, whatever the round (a round's later exchanges see
its earlier ones' saves). Saving in round r keeps every version after r - checkpoint.every
and the newest one at or before it; older ones are removed.
"""

from __future__ import annotations

import os
import re
from logging import INFO
from pathlib import Path

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.logger import log as flwr_log


class ClientState:
    """Named ArrayRecords kept in `context.state` and mirrored to disk, per round."""

    def __init__(
        self,
        memory: RecordDict,
        root: Path,
        run_id: str,
        partition_id: int,
        server_round: int,
        checkpoint_every: int = 1,
    ):
        self._memory = memory
        # A resumed run keeps its run id and continues; a new run starts from nothing.
        self.directory = root / run_id / f"partition-{partition_id}"
        self.round = server_round
        self.checkpoint_every = checkpoint_every  # how far back a resumed server may go

    def load(self, name: str) -> ArrayRecord | None:
        """The record this run saved, from memory; else (after a restart or a resume) the
        newest version saved on disk before this round; None if there is none."""
        if name in self._memory.array_records:
            return self._memory.array_records[name]
        earlier = [r for r in self._versions(name) if r < self.round]
        if not earlier:
            return None
        path = self._path(name, max(earlier))
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
        path = self._path(name, self.round)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
        floor = self.round - self.checkpoint_every  # the oldest round a resume starts after
        older = [r for r in self._versions(name) if r <= floor]
        for r in older:
            if r != max(older):
                self._path(name, r).unlink(missing_ok=True)

    def _versions(self, name: str) -> list[int]:
        """The rounds of the saved versions of `name`."""
        if not self.directory.is_dir():
            return []
        pattern = re.compile(re.escape(name) + r"\.r(\d+)\.npz")
        found = (pattern.fullmatch(p.name) for p in self.directory.iterdir())
        return [int(m.group(1)) for m in found if m]

    def _path(self, name: str, server_round: int) -> Path:
        return self.directory / f"{name}.r{server_round}.npz"
