"""What the overhead studies (tracking, clock_overhead) time: two settings of 20 rounds, and
a run's seconds per round read from its metrics.csv."""

from __future__ import annotations

import itertools
from pathlib import Path

from fl_system.records.results import read_rows

# 20 rounds, not the default 5: a local round's seconds jump between ~1 and ~4 s with the
# moments the SuperNodes poll, and only many rounds average that out
ROUNDS = 20
SETTINGS = {
    f"default command (runtime=local, 4 clients), {ROUNDS} rounds": [f"num_rounds={ROUNDS}"],
    f"simulation, 100 clients, {ROUNDS} rounds": [
        "runtime=simulation",
        "num_clients=100",
        f"num_rounds={ROUNDS}",
    ],
}
TIMEOUT = 900  # seconds for one run


def round_seconds(run_dir: Path) -> list[float]:
    """Each round's seconds from round 2 on: the differences of `wall_seconds` (round 1 also
    holds the first messages' set-up)."""
    walls = [float(r["wall_seconds"]) for r in read_rows(run_dir / "metrics.csv")]
    return [b - a for a, b in itertools.pairwise(walls)]
