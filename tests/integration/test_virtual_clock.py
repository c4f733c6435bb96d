"""system=...: the virtual clock in real simulation runs, for every family of algorithm, and in
proportion to the bytes when the uplink is what is slow."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fl_system.records.results import read_rows

from .conftest import QUICK, run_sweep

pytestmark = pytest.mark.integration

# One of each shape of round: plain averaging (fedavg), a server optimiser (fedadam), control
# variates (scaffold), normalised steps (fednova), EFL's extra records both ways, FedGSNR's
# query before training, TACO's expulsions, FedCat's chains of copies.
FAMILIES = ("fedavg", "fedadam", "scaffold", "fednova", "efl", "fedgsnr", "taco", "fedcat")
UPLINK_MBPS = 2.0
# The uplink is all that takes time: devices and downlinks a million times faster, no latency
UPLINK_ONLY = [
    "system=slow_uplink",
    f"system.uplink_mbps.median={UPLINK_MBPS}",
    "system.uplink_mbps.sigma=0",
    "system.downlink_mbps.median=1e9",
    "system.compute.median=1e9",
    "system.latency_ms=0",
]
ARGS = [*QUICK, "runtime=simulation", "num_rounds=2", "train.local_steps=5"]


def _clock(run_dir: Path) -> list[dict[str, str]]:
    rows = read_rows(run_dir / "metrics.csv")
    assert rows, run_dir
    return rows


def test_every_family_runs_on_the_clock_and_the_clock_adds_up(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Every family completes under system=...; virtual_clock is the running sum of
    virtual_seconds; a round lasts as long as its slowest client; each client's time is its
    bytes over the uplink, so a round's client times sum to its uploaded bytes / uplink."""
    sweep = [*ARGS, *UPLINK_ONLY, f"algorithm={','.join(FAMILIES)}"]
    members = run_sweep(sweep, tmp_path / "sweep", cli_env, timeout=600)
    assert len(members) == len(FAMILIES)
    rate = UPLINK_MBPS * 1e6 / 8
    for member in members:
        name = OmegaConf.load(member / "config.yaml").algorithm.name
        rows = _clock(member)
        assert [r["round"] for r in rows] == ["1", "2"], name
        total = 0.0
        for row in rows:
            seconds = float(row["virtual_seconds"])
            total += seconds
            assert float(row["virtual_clock"]) == pytest.approx(total, rel=1e-9), name
            times = [float(v) for k, v in row.items() if k.startswith("vtime_") and v]
            assert len(times) == int(row["participants"]), name
            assert seconds == max(times), name
        drawn = read_rows(member / "system_profiles.csv")  # the profiles the clock used
        assert [float(r["uplink_mbps"]) for r in drawn] == pytest.approx([UPLINK_MBPS] * 2)
        # round 2 (round 1 also carries the handshakes): uploads alone set the clients' times
        second = rows[1]
        times = [float(v) for k, v in second.items() if k.startswith("vtime_") and v]
        assert sum(times) * rate == pytest.approx(float(second["bytes_up"]), rel=1e-3), name


def test_compression_cuts_virtual_time_as_it_cuts_uploaded_bytes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """FedAvg dense vs sparse ternary uploads (q = 0.01), the uplink the bottleneck: the
    round's virtual time falls in proportion to the bytes each client sends. (A wider model
    keeps the compressed update well above a message's metadata, which the clock leaves out:
    its random ids vary its size between identical runs.)"""
    sweep = [*ARGS, *UPLINK_ONLY, "model.hidden=[1000,1000]", "compression.up=none,st"]
    runs = {
        OmegaConf.load(member / "config.yaml").compression.up.name: _clock(member)[1]
        for member in run_sweep(sweep, tmp_path / "sweep", cli_env)
    }
    dense, sparse = runs["none"], runs["st"]
    bytes_ratio = float(dense["bytes_up"]) / float(sparse["bytes_up"])
    time_ratio = float(dense["virtual_seconds"]) / float(sparse["virtual_seconds"])
    assert bytes_ratio > 5  # compression did cut the uploads
    assert time_ratio == pytest.approx(bytes_ratio, rel=0.02)
