"""Device and availability traces in both formats (small files written here), and the system
settings that are refused with one line before anything starts."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from fl_system.cli import CONF_DIR
from fl_system.config.validation import check_values
from fl_system.heterogeneity import from_config, traces
from fl_system.heterogeneity.clock import Profile
from fl_system.records.results import write_table
from fl_system.settings.value_checks import ConfigError


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["dataset=digits", "model=mlp", *overrides])


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_csv_device_trace(tmp_path: Path) -> None:
    trace = _write(
        tmp_path / "devices.csv",
        "client,seconds_per_sample,uplink_mbps,downlink_mbps,latency_ms\n"
        "1,0.002,8,16,\n"
        "0,0.001,4,40,30\n",
    )
    profiles = traces.device_profiles(trace, 2, latency=0.05)
    assert profiles == {
        0: Profile(0.001, 0.5e6, 5e6, 0.03),
        1: Profile(0.002, 1e6, 2e6, 0.05),  # no latency given: the run's
    }


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_drawn_profiles_written_as_a_trace_replay_exactly(tmp_path: Path, scale: float) -> None:
    """A run's system_profiles.csv is a device trace: another run reads the same profiles."""
    drawn = {
        0: Profile(0.001234 * scale, 0.5e6 * scale, 5e6, 0.03 * scale),
        1: Profile(0.002 * scale, 1e6, 2e6 * scale, 0.0),
    }
    path = tmp_path / "system_profiles.csv"
    write_table(path, traces.device_rows(drawn))
    assert path.read_text().splitlines()[0] == (
        "client,seconds_per_sample,uplink_mbps,downlink_mbps,latency_ms"
    )
    replayed = traces.device_profiles(path, 2, latency=9.0)
    for p, profile in drawn.items():
        assert replayed[p].seconds_per_sample == pytest.approx(profile.seconds_per_sample, 1e-15)
        assert replayed[p].up_bytes_per_second == pytest.approx(profile.up_bytes_per_second)
        assert replayed[p].down_bytes_per_second == pytest.approx(profile.down_bytes_per_second)
        assert replayed[p].latency == pytest.approx(profile.latency, rel=1e-15, abs=0)


def test_fedscale_device_capacity_in_id_order(tmp_path: Path) -> None:
    """FedScale: inference ms per sample (training = 3x) and kbit/s both ways."""
    capacity = {
        7: {"computation": 20.0, "communication": 8000.0},
        3: {"computation": 10.0, "communication": 800.0},
    }
    trace = tmp_path / "client_device_capacity"
    trace.write_bytes(pickle.dumps(capacity))
    profiles = traces.device_profiles(trace, 2, latency=0.0)
    assert profiles[0] == Profile(0.03, 1e5, 1e5, 0.0)  # id 3
    assert profiles[1] == Profile(0.06, 1e6, 1e6, 0.0)  # id 7


def test_availability_traces_in_both_formats(tmp_path: Path) -> None:
    csv_trace = _write(tmp_path / "sessions.csv", "client,start,end\n0,0,10\n1,5,20\n0,30,40\n")
    sessions = traces.availability(csv_trace, 2)
    assert sessions.online([0, 1], 6.0) == [0, 1]
    assert sessions.online([0, 1], 25.0) == []
    assert sessions.next_online([0, 1], 25.0) == 30.0
    behave = {
        1: {"active": [0, 50], "inactive": [20, 60], "finish_time": 100, "model": "x"},
        2: {"active": [10], "inactive": [90], "finish_time": 100, "model": "y"},
    }
    fedscale = tmp_path / "client_behave_trace"
    fedscale.write_bytes(pickle.dumps(behave))
    sessions = traces.availability(fedscale, 2)
    assert sessions.online([0, 1], 55.0) == [0, 1]
    assert sessions.online([0, 1], 125.0) == [1]  # 125 mod 100 = 25
    assert sessions.session_end(0, 150.0) == 160.0


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "client,seconds_per_sample,uplink_mbps,downlink_mbps\n0,0.01,-5,10\n1,0.01,5,10\n",
            "line 2 uplink_mbps must be a positive number, got '-5'",
        ),
        (
            "client,seconds_per_sample,uplink_mbps,downlink_mbps\n0,0.01,5,10\n",
            "has no entry for partitions 1, 2 (1 clients in the file, the run has 3)",
        ),
        ("client,speed\n0,1\n", "needs the columns client, seconds_per_sample"),
        (
            "client,seconds_per_sample,uplink_mbps,downlink_mbps\nx,0.01,5,10\n",
            "line 2: client must be a partition id, got 'x'",
        ),
        (
            "client,seconds_per_sample,uplink_mbps,downlink_mbps\n0,0.01,5,10\n1,1,5,10\n"
            "\n2,1,5,10\n0,0.5,1,1\n",
            "client 0 is on lines 2 and 6 (a device trace has one row per client)",
        ),
        (
            "client,seconds_per_sample,uplink_mbps,downlink_mbps\n0,0.01,5,10\n1,1,5,10,9\n",
            "line 3 has 5 fields, the header 4 (client,seconds_per_sample,uplink_mbps,downlink",
        ),
        (
            "client;seconds_per_sample;uplink_mbps;downlink_mbps\n0;0.01;5;10\n",
            "the header read: 'client;seconds_per_sample;uplink_mbps;downlink_mbps', columns "
            "separated by commas",
        ),
    ],
)
def test_bad_device_traces_are_one_line(tmp_path: Path, text: str, problem: str) -> None:
    trace = _write(tmp_path / "bad.csv", text)
    with pytest.raises(traces.TraceError) as err:
        traces.device_profiles(trace, 3, latency=0.0)
    assert problem in str(err.value) and "\n" not in str(err.value)


def test_unknown_and_unsafe_formats_are_refused(tmp_path: Path) -> None:
    binary = tmp_path / "trace.bin"
    binary.write_bytes(b"\x00\xff\xfe binary")
    with pytest.raises(traces.TraceError, match="unknown format: neither CSV text nor a Fed"):
        traces.device_profiles(binary, 1, latency=0.0)
    unsafe = tmp_path / "unsafe.pkl"
    unsafe.write_bytes(pickle.dumps({0: os.getcwd}))  # would name a function to call
    with pytest.raises(traces.TraceError, match=r"asks to build posix\.getcwd"):
        traces.device_profiles(unsafe, 1, latency=0.0)
    with pytest.raises(traces.TraceError, match="cannot read trace"):
        traces.availability(tmp_path / "absent.csv", 1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["system=profiles", "system.uplink_mbps.median=-5"], "system.uplink_mbps must be"),
        (["system=mobile", "system.compute.sigma=-1"], "system.compute must be"),
        (["system=profiles", "system.latency_ms=-1"], "system.latency_ms must be a number"),
        (["system=trace"], "system=trace needs system.trace=<file>"),
        (["system=trace", "system.trace=/nonexistent.csv"], "cannot read trace /nonexistent.csv"),
        (
            ["system=profiles", "system.round_deadline=10"],
            "system.round_deadline needs train.local_steps",
        ),
        (
            [
                "system=profiles",
                "system.round_deadline=10",
                "train.local_steps=5",
                "stragglers.incomplete=0.5",
            ],
            "system.round_deadline decides who straggles",
        ),
        (["system=profiles", "system.first_k=5"], "system.first_k (5) exceeds the clients"),
        (
            ["system=profiles", "system.availability.fraction=0"],
            "system.availability.fraction must be a number in (0, 1]",
        ),
    ],
)
def test_bad_system_settings_name_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_values(_cfg(*overrides))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_trace_run_reads_its_files(tmp_path: Path) -> None:
    devices = _write(
        tmp_path / "d.csv",
        "client,seconds_per_sample,uplink_mbps,downlink_mbps\n"
        + "".join(f"{p},0.001,{p + 1},10\n" for p in range(4)),
    )
    sessions = _write(
        tmp_path / "s.csv", "client,start,end\n" + "".join(f"{p},0,99\n" for p in range(4))
    )
    cfg = _cfg("system=trace", f"system.trace={devices}", f"system.availability.trace={sessions}")
    check_values(cfg)
    model = from_config(cfg)
    assert model is not None and model.availability is not None
    assert model.profiles[3] == Profile(0.001, 0.5e6, 1.25e6, 0.0)
    assert model.availability.online([0, 1, 2, 3], 100.0) == []
