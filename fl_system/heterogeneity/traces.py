"""Device and availability traces: FedScale's pickled dictionaries, or plain CSV.

Device trace, per client: seconds per training sample, uplink and downlink in Mbit/s, and
optionally the one-way latency in ms.
  - CSV, header `client,seconds_per_sample,uplink_mbps,downlink_mbps[,latency_ms]`, `client`
    = partition id.
  - FedScale's `client_device_capacity`: {client id: {"computation": inference ms per
    sample, "communication": kbit/s}}. As FedScale does, a training sample costs 3x an
    inference (forward + a backward of twice its cost) and one bandwidth serves both ways.
Availability trace, per client: online intervals in virtual seconds.
  - CSV, header `client,start,end`: each row one session [start, end).
  - FedScale's `client_behave_trace`: {client id: {"active": [t...], "inactive": [t...],
    "finish_time": T}}: online from active[i] to inactive[i], repeating every T seconds.
A FedScale file's clients are taken in id order, the i-th for partition i. Pickles are read
with an unpickler that builds nothing but plain containers and numbers.
"""

from __future__ import annotations

import csv
import io
import math
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fl_system.heterogeneity.availability import Availability, Sessions
from fl_system.heterogeneity.clock import Profile, megabits

FEDSCALE_TRAINING_FACTOR = 3.0  # FedScale's augmentation_factor: training = 3x inference
DEVICE_COLUMNS = ("client", "seconds_per_sample", "uplink_mbps", "downlink_mbps")
SESSION_COLUMNS = ("client", "start", "end")


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file and the problem."""


class _PlainUnpickler(pickle.Unpickler):
    """Dictionaries, lists, strings and numbers only: a trace never needs to run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it asks to build {module}.{name}")


def _read(path: Path) -> tuple[str, Any]:
    """('fedscale', the unpickled dict) or ('csv', its text)."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TraceError(f"cannot read trace {path}: {err.strerror or err}") from None
    if data[:1] == b"\x80":  # a pickle's protocol opcode
        try:
            loaded = _PlainUnpickler(io.BytesIO(data)).load()
        except Exception as err:  # any damage reads as one line
            raise TraceError(f"trace {path} is not a readable FedScale pickle: {err}") from None
        if not isinstance(loaded, dict):
            raise TraceError(f"trace {path}: a FedScale trace is a dict by client id")
        return "fedscale", loaded
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError(
            f"trace {path} is in an unknown format: neither CSV text nor a FedScale pickle"
        ) from None
    return "csv", text


def _number(path: Path, where: str, value: Any, *, positive: bool = True) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"trace {path}: {where} is not a number ({value!r})") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        need = "a positive number" if positive else "a number >= 0"
        raise TraceError(f"trace {path}: {where} must be {need}, got {value!r}")
    return x


def _by_partition(path: Path, entries: Mapping[int, Any], num_clients: int) -> dict[int, Any]:
    """Entries for partitions 0..num_clients-1; one line naming the missing ones."""
    missing = [p for p in range(num_clients) if p not in entries]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise TraceError(
            f"trace {path} has no entry for partition{'s' if len(missing) > 1 else ''} "
            f"{shown} ({len(entries)} clients in the file, the run has {num_clients})"
        )
    return {p: entries[p] for p in range(num_clients)}


def _fedscale_entries(path: Path, loaded: dict) -> dict[int, Any]:
    """A FedScale dict's clients in id order, as partitions 0, 1, ..."""
    try:
        ids = sorted(loaded)
    except TypeError:
        raise TraceError(f"trace {path}: client ids of mixed types") from None
    return {p: loaded[client] for p, client in enumerate(ids)}


def _csv_rows(path: Path, text: str, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line number, row) of each data line: every line has the header's fields, no more, no
    fewer (a value in an extra field would be ignored without a word)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    absent = [c for c in required if c not in header]
    if absent:
        raise TraceError(
            f"trace {path}: a CSV needs the columns {', '.join(required)} "
            f"(missing {', '.join(absent)}; the header read: {','.join(header)!r}, "
            "columns separated by commas)"
        )
    rows = []
    for fields in reader:
        if not fields:  # a blank line
            continue
        if len(fields) != len(header):
            raise TraceError(
                f"trace {path}: line {reader.line_num} has {len(fields)} fields, the header "
                f"{len(header)} ({','.join(header)})"
            )
        rows.append((reader.line_num, dict(zip(header, fields, strict=True))))
    return rows


def _client(path: Path, row: dict, line: int) -> int:
    value = row["client"]
    if not str(value).strip().isdigit():
        raise TraceError(f"trace {path}: line {line}: client must be a partition id, got {value!r}")
    return int(value)


def device_rows(profiles: Mapping[int, Profile]) -> list[dict[str, float]]:
    """Profiles as a device trace's CSV rows (with latency_ms): what the virtual clock drew,
    written to a run's system_profiles.csv, is a trace another run can replay."""
    return [
        {
            "client": p,
            "seconds_per_sample": profile.seconds_per_sample,
            "uplink_mbps": profile.up_bytes_per_second * 8 / 1e6,
            "downlink_mbps": profile.down_bytes_per_second * 8 / 1e6,
            "latency_ms": profile.latency * 1e3,
        }
        for p, profile in sorted(profiles.items())
    ]


def device_profiles(path: Path, num_clients: int, *, latency: float) -> dict[int, Profile]:
    """Each partition's profile from a device trace; `latency` (s) where it gives none."""
    kind, loaded = _read(path)
    entries: dict[int, Profile] = {}
    if kind == "fedscale":
        for p, entry in _fedscale_entries(path, loaded).items():
            if not isinstance(entry, dict) or not {"computation", "communication"} <= set(entry):
                raise TraceError(
                    f"trace {path}: client {p} needs 'computation' and 'communication'"
                )
            ms = _number(path, f"client {p} computation", entry["computation"])
            rate = _number(path, f"client {p} communication", entry["communication"]) * 1e3 / 8
            entries[p] = Profile(FEDSCALE_TRAINING_FACTOR * ms / 1e3, rate, rate, latency)
    else:
        lines: dict[int, int] = {}  # partition -> the line that gave its profile
        for line, row in _csv_rows(path, loaded, DEVICE_COLUMNS):
            p = _client(path, row, line)
            if p in lines:
                raise TraceError(
                    f"trace {path}: client {p} is on lines {lines[p]} and {line} (a device "
                    "trace has one row per client)"
                )
            lines[p] = line
            where = f"line {line}"
            given = row.get("latency_ms")
            entries[p] = Profile(
                _number(path, f"{where} seconds_per_sample", row["seconds_per_sample"]),
                megabits(_number(path, f"{where} uplink_mbps", row["uplink_mbps"])),
                megabits(_number(path, f"{where} downlink_mbps", row["downlink_mbps"])),
                latency
                if given in (None, "")
                else _number(path, f"{where} latency_ms", given, positive=False) / 1e3,
            )
    return _by_partition(path, entries, num_clients)


def availability(path: Path, num_clients: int) -> Availability:
    """Each partition's sessions from an availability trace."""
    kind, loaded = _read(path)
    sessions: dict[int, Sessions] = {}
    if kind == "fedscale":
        for p, entry in _fedscale_entries(path, loaded).items():
            if not isinstance(entry, dict) or not {"active", "inactive", "finish_time"} <= set(
                entry
            ):
                raise TraceError(
                    f"trace {path}: client {p} needs 'active', 'inactive' and 'finish_time'"
                )
            starts, ends = (
                [_number(path, f"client {p} {key}", t, positive=False) for t in entry[key]]
                for key in ("active", "inactive")
            )
            if len(starts) != len(ends):
                raise TraceError(
                    f"trace {path}: client {p} has {len(starts)} 'active' and "
                    f"{len(ends)} 'inactive' times"
                )
            period = _number(path, f"client {p} finish_time", entry["finish_time"])
            sessions[p] = Sessions(zip(starts, ends, strict=True), period=period)
    else:
        spans: dict[int, list[tuple[float, float]]] = {}
        for line, row in _csv_rows(path, loaded, SESSION_COLUMNS):
            p = _client(path, row, line)
            start = _number(path, f"line {line} start", row["start"], positive=False)
            end = _number(path, f"line {line} end", row["end"], positive=False)
            if end <= start:
                raise TraceError(f"trace {path}: line {line}: end {end} is not after start {start}")
            spans.setdefault(p, []).append((start, end))
        sessions = {p: Sessions(s) for p, s in spans.items()}
    return Availability(_by_partition(path, sessions, num_clients))
