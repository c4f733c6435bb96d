"""What a grid will cost, from a short run of each setting (a study's --estimate)."""

from __future__ import annotations

from benchmarks.harness.outcome import RunOutcome


def project(short: RunOutcome, rounds: int) -> float:
    """Wall seconds of a `rounds`-round run, projected from a short run of the same setting."""
    return short.fixed_seconds + rounds * short.seconds_per_round
