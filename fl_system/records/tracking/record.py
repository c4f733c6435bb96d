"""`<run dir>/tracking.json`: each tracker's run id, the last round it received, its status.

Written after every round a tracker took, beside the checkpoint: `resume=true` continues the
same tracked runs and sends each only the rounds it lacks (a run stopped between its
checkpoint and its tracking gets that round on resume, none twice), and fl-run ends the runs
a killed ServerApp left open.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from fl_system.records.tracking.base import RUNNING

FILE = "tracking.json"


@dataclass
class Entry:
    id: str
    round: int = 0  # the last round this tracker received
    status: str = RUNNING


def load(run_dir: Path) -> dict[str, Entry]:
    """{tracker name: entry}; empty when the run was never tracked (or the file is unreadable,
    which makes trackers start new runs rather than stop this one)."""
    try:
        raw = json.loads((run_dir / FILE).read_text())
        return {name: Entry(**entry) for name, entry in raw.items()}
    except (OSError, ValueError, TypeError):
        return {}


def save(run_dir: Path, entries: dict[str, Entry]) -> None:
    """Atomically: a kill mid-write leaves the previous file."""
    path = run_dir / FILE
    part = path.with_suffix(".json.part")
    part.write_text(json.dumps({n: asdict(e) for n, e in entries.items()}, indent=1) + "\n")
    os.replace(part, path)
